package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// sealedPrefix starts every encrypted stored value; a literal that starts
// with it is taken for one (and must then decrypt).
const sealedPrefix = "encrypted:"

const sealedV1 = sealedPrefix + "v1:"

// IsSealed reports whether a stored value claims to be encrypted.
func IsSealed(v string) bool { return strings.HasPrefix(v, sealedPrefix) }

// Sealed is a parsed encrypted value.
type Sealed struct {
	KeyID string
	Nonce []byte
	Box   []byte // ciphertext with the GCM tag
}

// nonceSize is GCM's standard nonce size.
const nonceSize = 12

// gcmTagSize is GCM's tag size.
const gcmTagSize = 16

// ParseSealed parses encrypted:v1:<key id>:<base64(nonce||ciphertext)>. The
// errors never quote the value.
func ParseSealed(v string) (Sealed, error) {
	if !IsSealed(v) {
		return Sealed{}, errors.New("not an encrypted value")
	}
	if !strings.HasPrefix(v, sealedV1) {
		return Sealed{}, errors.New("encrypted value of an unknown version (this kmirror reads encrypted:v1:...); upgrade kmirror on this instance")
	}
	id, b64, ok := strings.Cut(v[len(sealedV1):], ":")
	if !ok || !keyIDRE.MatchString(id) {
		return Sealed{}, errors.New("malformed encrypted value: want encrypted:v1:KEYID:BASE64")
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return Sealed{}, fmt.Errorf("malformed encrypted value (key id %s): the ciphertext is not standard base64", id)
	}
	if len(raw) < nonceSize+gcmTagSize {
		return Sealed{}, fmt.Errorf("malformed encrypted value (key id %s): %d bytes are too short for a nonce and a tag", id, len(raw))
	}
	return Sealed{KeyID: id, Nonce: raw[:nonceSize], Box: raw[nonceSize:]}, nil
}

// String formats the stored form.
func (s Sealed) String() string {
	return sealedV1 + s.KeyID + ":" + base64.StdEncoding.EncodeToString(append(append([]byte(nil), s.Nonce...), s.Box...))
}

// additionalData binds a ciphertext to the mirror and config key it was made
// for: moved to another mirror or key, it does not decrypt. Mirror names
// cannot hold a NUL byte, so the encoding is unambiguous.
func additionalData(mirror, key string) []byte {
	return []byte("kmirror-secret-v1\x00" + mirror + "\x00" + key)
}

// Seal encrypts plaintext for mirror's config key with the current key and
// a random nonce.
func (k *Keyring) Seal(mirror, key, plaintext string) (string, error) {
	if k == nil {
		return "", ErrNoKeys
	}
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("encrypting %s: %w", key, err)
	}
	box := k.aeads[k.current].Seal(nil, nonce, []byte(plaintext), additionalData(mirror, key))
	return Sealed{KeyID: k.current, Nonce: nonce, Box: box}.String(), nil
}

// ErrNoKeys says the instance has no secrets key file.
var ErrNoKeys = errors.New("this instance has no secrets key (--secrets-key-file or secrets_key_file in the proxy config)")

// Open decrypts a stored value made by Seal for the same mirror and key.
func (k *Keyring) Open(mirror, key, stored string) (string, error) {
	s, err := ParseSealed(stored)
	if err != nil {
		return "", err
	}
	if k == nil {
		return "", fmt.Errorf("it is encrypted with key id %s and %w", s.KeyID, ErrNoKeys)
	}
	aead, ok := k.aeads[s.KeyID]
	if !ok {
		return "", fmt.Errorf("it is encrypted with key id %s, which this instance's secrets key file does not hold (it holds %s); add that key to the file",
			s.KeyID, strings.Join(k.ids, ", "))
	}
	plain, err := aead.Open(nil, s.Nonce, s.Box, additionalData(mirror, key))
	if err != nil {
		return "", fmt.Errorf("it does not decrypt with key id %s: the key under that id differs from the one that encrypted it, or the value was altered or made for another mirror or config", s.KeyID)
	}
	return string(plain), nil
}
