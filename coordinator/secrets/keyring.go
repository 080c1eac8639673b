// Package secrets keeps a mirror's source credentials out of __mirror_state
// in clear. A secret mirror config (mirrorconfig.IsSecret) is stored either
// as a config provider reference in Kafka's style (${file:PATH:KEY},
// ${env:NAME}, ${directory:DIR:FILE}), which every instance resolves itself
// when it builds the source client, or encrypted with AES-256-GCM under a key
// that every instance is given (--secrets-key-file):
//
//	encrypted:v1:<key id>:<base64(nonce || ciphertext)>
//
// The additional data binds a ciphertext to its mirror and config key, so it
// cannot be moved to another mirror or key. The design is in
// docs/SECURITY.md, section "Secrets".
package secrets

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// keyIDRE limits key ids to what is safe inside a stored value and a log line.
var keyIDRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Keyring is an instance's encryption keys: the first of the key file
// encrypts, all of them decrypt (by the key id in the stored value), so a key
// can be rotated by putting a new one first and keeping the old ones.
type Keyring struct {
	current string
	ids     []string
	aeads   map[string]cipher.AEAD
}

// LoadKeyFile reads a secrets key file.
func LoadKeyFile(path string) (*Keyring, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key file: %w", err)
	}
	k, err := ParseKeyFile(string(raw))
	if err != nil {
		return nil, fmt.Errorf("secrets key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKeyFile parses key file text: one key a line, `ID=BASE64` where BASE64
// is 32 random bytes in standard base64 (`openssl rand -base64 32`); blank
// lines and lines starting with '#' are ignored. Errors name the line, never
// its key material.
func ParseKeyFile(text string) (*Keyring, error) {
	k := &Keyring{aeads: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		id, b64, ok := strings.Cut(line, "=")
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		if !ok || !keyIDRE.MatchString(id) {
			return nil, fmt.Errorf("line %d: want ID=BASE64KEY with an id of 1 to 64 characters from A-Z, a-z, 0-9, '.', '_' and '-'", n)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("line %d: key id %s is given twice; every key needs an id of its own", n, id)
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != 32 {
			return nil, fmt.Errorf("line %d: key %s is not 32 bytes in standard base64 (make one with `openssl rand -base64 32`)", n, id)
		}
		aead, err := newAEAD(raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %s: %w", n, id, err)
		}
		k.aeads[id] = aead
		k.ids = append(k.ids, id)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.ids) == 0 {
		return nil, fmt.Errorf("no key: want lines ID=BASE64KEY, the first one encrypts")
	}
	k.current = k.ids[0]
	return k, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Current is the id of the key that encrypts.
func (k *Keyring) Current() string { return k.current }

// IDs lists the key ids in file order (the current one first).
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }
