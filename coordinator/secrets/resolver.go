package secrets

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
)

// Resolver turns a mirror's configs between their stored form (references,
// encrypted values) and the form a source client is built from. A nil
// Resolver has no keys and resolves references from this process's
// environment and files.
type Resolver struct {
	keys *Keyring
	env  env
}

// NewResolver returns a resolver with keys (nil: none configured).
func NewResolver(keys *Keyring) *Resolver { return &Resolver{keys: keys, env: osEnv} }

// Keys is the resolver's keyring (nil when none is configured).
func (r *Resolver) Keys() *Keyring {
	if r == nil {
		return nil
	}
	return r.keys
}

func (r *Resolver) environment() env {
	if r == nil || r.env.readFile == nil {
		return osEnv
	}
	return r.env
}

// Error is a secret config that this instance cannot turn into its value.
// It names the mirror, the config and the reference or key id, never a
// value: it is logged and recorded in partition states.
type Error struct {
	Mirror, Key string
	Stored      string // the reference, or "encrypted value"; never a secret
	Err         error
}

func (e *Error) Error() string {
	return fmt.Sprintf("mirror %s: %s = %s does not resolve on this instance: %v", e.Mirror, e.Key, e.Stored, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// shownStored is how a stored value is named in errors.
func shownStored(v string) string {
	if IsReference(v) {
		return v
	}
	if IsSealed(v) {
		if s, err := ParseSealed(v); err == nil {
			return "encrypted value (key id " + s.KeyID + ")"
		}
		return "encrypted value"
	}
	return "******"
}

// Resolve returns configs with every reference replaced by what it points
// at on this instance (in any connection config, e.g. sasl.username too) and
// every encrypted secret decrypted. The result is for building a client and
// must never be stored, logged or shown.
func (r *Resolver) Resolve(mirror string, configs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(configs))
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v := configs[k]
		switch {
		case IsReference(v) && (mirrorconfig.IsConnection(k) || mirrorconfig.IsSecret(k)):
			ref, err := ParseReference(v)
			if err == nil {
				v, err = r.environment().resolve(ref)
			}
			if err != nil {
				return nil, &Error{Mirror: mirror, Key: k, Stored: shownStored(configs[k]), Err: err}
			}
		case IsSealed(v) && mirrorconfig.IsSecret(k):
			var err error
			if v, err = r.Keys().Open(mirror, k, v); err != nil {
				return nil, &Error{Mirror: mirror, Key: k, Stored: shownStored(configs[k]), Err: err}
			}
		}
		out[k] = v
	}
	return out, nil
}

// SealNew makes the stored form of a new mirror's configs: secrets given
// literally are encrypted with the current key; references are kept as
// written (each instance resolves them); a value given already encrypted
// must decrypt here. A literal secret without a key is refused: kmirror does
// not store secrets in clear.
func (r *Resolver) SealNew(mirror string, configs map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(configs))
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v := configs[k]
		out[k] = v
		switch {
		case IsReference(v) && (mirrorconfig.IsConnection(k) || mirrorconfig.IsSecret(k)):
			if _, err := ParseReference(v); err != nil {
				return nil, fmt.Errorf("mirror config %s: %w", k, err)
			}
		case !mirrorconfig.IsSecret(k) || v == "":
		case IsSealed(v):
			if _, err := r.Keys().Open(mirror, k, v); err != nil {
				return nil, fmt.Errorf("mirror config %s holds an encrypted value that this instance cannot use: %w", k, err)
			}
		case r.Keys() == nil:
			return nil, fmt.Errorf("mirror config %s is given literally and %w; kmirror does not store secrets in clear: "+
				"give every instance a secrets key file, or give a config provider reference such as ${file:/etc/kmirror/source.properties:%s} or ${env:SOURCE_SASL_PASSWORD}, "+
				"which every instance resolves itself", k, ErrNoKeys, k)
		default:
			sealed, err := r.keys.Seal(mirror, k, v)
			if err != nil {
				return nil, err
			}
			out[k] = sealed
		}
	}
	return out, nil
}

// Reseal re-saves a stored mirror's secrets (on every config change): a
// secret in clear (written by an older kmirror) or encrypted with a key
// that is no longer the current one is encrypted with the current key.
// What this instance cannot re-encrypt (no key, or the value's key is
// missing here) is kept as stored, so that changing a rate limit never
// depends on it; changed lists the configs that were re-encrypted.
func (r *Resolver) Reseal(mirror string, configs map[string]string) (out map[string]string, changed []string) {
	out = make(map[string]string, len(configs))
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		v := configs[k]
		out[k] = v
		if !mirrorconfig.IsSecret(k) || v == "" || IsReference(v) || r.Keys() == nil {
			continue
		}
		plain := v
		if IsSealed(v) {
			s, err := ParseSealed(v)
			if err != nil || s.KeyID == r.keys.current {
				continue
			}
			if plain, err = r.keys.Open(mirror, k, v); err != nil {
				continue
			}
		}
		sealed, err := r.keys.Seal(mirror, k, plain)
		if err != nil {
			continue
		}
		out[k] = sealed
		changed = append(changed, k)
	}
	return out, changed
}

// InClear lists a mirror's secret configs stored in clear (by an older
// kmirror).
func InClear(configs map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(configs)) {
		if v := configs[k]; mirrorconfig.IsSecret(k) && v != "" && !IsReference(v) && !IsSealed(v) {
			out = append(out, k)
		}
	}
	return out
}

// Mask is what dump-state shows of a stored secret: references as written
// (they name a file or variable, not the secret), the key id of encrypted
// values, and a warning for clear text (written by an older kmirror; an
// alter on an instance with a key re-saves it encrypted); never a secret.
func Mask(v string) string {
	switch {
	case v == "":
		return ""
	case IsReference(v):
		return v
	case IsSealed(v):
		if s, err := ParseSealed(v); err == nil {
			return "****** (encrypted, key " + s.KeyID + ")"
		}
		return "****** (malformed encrypted value)"
	}
	return "****** (stored in clear)"
}
