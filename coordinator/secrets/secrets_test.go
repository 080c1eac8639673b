package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newKey(t testing.TB) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func keyring(t testing.TB, lines ...string) *Keyring {
	t.Helper()
	k, err := ParseKeyFile(strings.Join(lines, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseKeyFile(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	k := keyring(t, "# keys, newest first", "", "k2 = "+k2, "k1="+k1)
	if k.Current() != "k2" || strings.Join(k.IDs(), ",") != "k2,k1" {
		t.Fatalf("current %s, ids %v", k.Current(), k.IDs())
	}
	short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	for text, want := range map[string]string{
		"":                        "no key",
		"# only a comment\n":      "no key",
		"k1\n":                    "line 1: want ID=BASE64KEY",
		"bad id=" + k1:            "line 1: want ID=BASE64KEY",
		"k1=" + k1 + "\nk1=" + k2: "line 2: key id k1 is given twice",
		"k1=" + short:             "line 1: key k1 is not 32 bytes",
		"k1=not base64!":          "line 1: key k1 is not 32 bytes",
	} {
		_, err := ParseKeyFile(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", text, err, want)
		}
		if err != nil && strings.Contains(err.Error(), k1) {
			t.Errorf("%q: the error quotes key material: %v", text, err)
		}
	}
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := keyring(t, "k1="+newKey(t))
	for _, plain := range []string{"s3cret", "", "ünïcode \x00 and = : } signs"} {
		sealed, err := k.Seal("m1", "sasl.password", plain)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(sealed, "encrypted:v1:k1:") || (plain != "" && strings.Contains(sealed, plain)) {
			t.Fatalf("stored form %q", sealed)
		}
		got, err := k.Open("m1", "sasl.password", sealed)
		if err != nil || got != plain {
			t.Fatalf("Open = %q, %v; want %q", got, err, plain)
		}
	}
	a, _ := k.Seal("m1", "sasl.password", "same")
	b, _ := k.Seal("m1", "sasl.password", "same")
	if a == b {
		t.Fatal("two encryptions of one value are equal: the nonce is not random")
	}
}

func TestOpenRefusesOtherMirrorKeyOrTamperedValue(t *testing.T) {
	k := keyring(t, "k1="+newKey(t))
	sealed, err := k.Seal("m1", "sasl.password", "marker-123")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSealed(sealed)
	if err != nil {
		t.Fatal(err)
	}
	tampered := s
	tampered.Box = append([]byte(nil), s.Box...)
	tampered.Box[0] ^= 1
	cases := map[string]struct{ mirror, key, stored string }{
		"other mirror":      {"m2", "sasl.password", sealed},
		"other config key":  {"m1", "ssl.key.password", sealed},
		"tampered":          {"m1", "sasl.password", tampered.String()},
		"truncated":         {"m1", "sasl.password", sealed[:len(sealed)-8]},
		"unknown version":   {"m1", "sasl.password", strings.Replace(sealed, ":v1:", ":v9:", 1)},
		"key id not held":   {"m1", "sasl.password", strings.Replace(sealed, ":k1:", ":k0:", 1)},
		"not base64":        {"m1", "sasl.password", "encrypted:v1:k1:@@@@"},
		"no ciphertext sep": {"m1", "sasl.password", "encrypted:v1:k1"},
	}
	for name, c := range cases {
		got, err := k.Open(c.mirror, c.key, c.stored)
		if err == nil {
			t.Errorf("%s: opened to %q", name, got)
			continue
		}
		if strings.Contains(err.Error(), "marker-123") {
			t.Errorf("%s: the error quotes the secret: %v", name, err)
		}
	}
}

func TestWrongKeyUnderSameID(t *testing.T) {
	sealed, err := keyring(t, "k1="+newKey(t)).Seal("m1", "sasl.password", "x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = keyring(t, "k1="+newKey(t)).Open("m1", "sasl.password", sealed)
	if err == nil || !strings.Contains(err.Error(), "does not decrypt with key id k1") {
		t.Fatalf("error %v", err)
	}
	var none *Keyring
	if _, err := none.Open("m1", "sasl.password", sealed); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("without keys: %v", err)
	}
}

func TestRotation(t *testing.T) {
	old, next := newKey(t), newKey(t)
	before := NewResolver(keyring(t, "k1="+old))
	stored, err := before.SealNew("m1", map[string]string{"sasl.password": "pw", "sasl.username": "u"})
	if err != nil {
		t.Fatal(err)
	}
	after := NewResolver(keyring(t, "k2="+next, "k1="+old))
	got, err := after.Resolve("m1", stored)
	if err != nil || got["sasl.password"] != "pw" {
		t.Fatalf("old key still decrypts: %v %v", got, err)
	}
	resaved, changed := after.Reseal("m1", stored)
	if strings.Join(changed, ",") != "sasl.password" || !strings.HasPrefix(resaved["sasl.password"], "encrypted:v1:k2:") {
		t.Fatalf("re-saved %v, changed %v", resaved, changed)
	}
	onlyNew := NewResolver(keyring(t, "k2="+next))
	if got, err := onlyNew.Resolve("m1", resaved); err != nil || got["sasl.password"] != "pw" {
		t.Fatalf("after re-save the old key is not needed: %v %v", got, err)
	}
	if _, err := onlyNew.Resolve("m1", stored); err == nil || !strings.Contains(err.Error(), "key id k1") {
		t.Fatalf("not re-saved, without k1: %v", err)
	}
	// What this instance cannot re-encrypt stays as stored.
	if out, changed := onlyNew.Reseal("m1", stored); len(changed) != 0 || out["sasl.password"] != stored["sasl.password"] {
		t.Fatalf("kept: %v %v", out, changed)
	}
}

func TestSealNew(t *testing.T) {
	var noKeys *Resolver
	_, err := noKeys.SealNew("m1", map[string]string{"sasl.password": "marker-1"})
	if err == nil || !strings.Contains(err.Error(), "given literally") || strings.Contains(err.Error(), "marker-1") {
		t.Fatalf("literal without key: %v", err)
	}
	for _, ref := range []string{"${file:/etc/k.properties:sasl.password}", "${env:PW}", "${directory:/run/secrets:pw}"} {
		out, err := noKeys.SealNew("m1", map[string]string{"sasl.password": ref})
		if err != nil || out["sasl.password"] != ref {
			t.Fatalf("%s: %v %v", ref, out, err)
		}
	}
	if _, err := noKeys.SealNew("m1", map[string]string{"sasl.password": "${vault:secret/x:pw}"}); err == nil || !strings.Contains(err.Error(), "unknown config provider") {
		t.Fatalf("unknown provider: %v", err)
	}
	r := NewResolver(keyring(t, "k1="+newKey(t)))
	out, err := r.SealNew("m1", map[string]string{"sasl.password": "marker-2", "bootstrap.servers": "h:9092"})
	if err != nil || !IsSealed(out["sasl.password"]) || out["bootstrap.servers"] != "h:9092" {
		t.Fatalf("%v %v", out, err)
	}
	// An encrypted value must be one this instance can use, for this mirror.
	if _, err := r.SealNew("m2", out); err == nil {
		t.Fatal("a ciphertext of mirror m1 was accepted for m2")
	}
	if again, err := r.SealNew("m1", out); err != nil || again["sasl.password"] != out["sasl.password"] {
		t.Fatalf("re-given ciphertext: %v %v", again, err)
	}
}

func TestResolveProviders(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "source.properties")
	if err := os.WriteFile(props, []byte("# source\nsasl.password = from-file\nuser=bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("from-dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KMIRROR_TEST_PW", "from-env")
	var r *Resolver
	for ref, want := range map[string]string{
		"${file:" + props + ":sasl.password}": "from-file",
		"${env:KMIRROR_TEST_PW}":              "from-env",
		"${directory:" + dir + ":pw}":         "from-dir",
	} {
		got, err := r.Resolve("m1", map[string]string{"sasl.password": ref, "sasl.username": "${file:" + props + ":user}"})
		if err != nil || got["sasl.password"] != want || got["sasl.username"] != "bob" {
			t.Errorf("%s: %v %v", ref, got, err)
		}
	}
	for ref, want := range map[string]string{
		"${file:" + filepath.Join(dir, "missing.properties") + ":sasl.password}": "no such file",
		"${file:" + props + ":nokey}":                                            "has no key nokey",
		"${env:KMIRROR_TEST_UNSET_VARIABLE}":                                     "KMIRROR_TEST_UNSET_VARIABLE is not set",
		"${directory:" + dir + ":missing}":                                       "no such file",
		"${directory:" + dir + ":..}":                                            "file name inside DIR",
	} {
		_, err := r.Resolve("m1", map[string]string{"sasl.password": ref})
		var se *Error
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "mirror m1") {
			t.Errorf("%s: error %v, want one naming the mirror, the reference and %q", ref, err, want)
		}
	}
	// A broken properties file's content is not quoted.
	bad := filepath.Join(dir, "bad.properties")
	if err := os.WriteFile(bad, []byte("sasl.password=marker-\\uZZ"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve("m1", map[string]string{"sasl.password": "${file:" + bad + ":sasl.password}"}); err == nil || strings.Contains(err.Error(), "marker") {
		t.Fatalf("bad file: %v", err)
	}
}

func TestResolveEncryptedWithoutKey(t *testing.T) {
	stored, err := NewResolver(keyring(t, "k1="+newKey(t))).SealNew("m1", map[string]string{"sasl.password": "marker-3"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewResolver(nil).Resolve("m1", stored)
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, ErrNoKeys) || !strings.Contains(err.Error(), "key id k1") || strings.Contains(err.Error(), "marker-3") {
		t.Fatalf("error %v", err)
	}
}

func TestMaskAndInClear(t *testing.T) {
	sealed, _ := keyring(t, "k7="+newKey(t)).Seal("m", "sasl.password", "marker-4")
	for v, want := range map[string]string{
		sealed:             "****** (encrypted, key k7)",
		"${env:X}":         "${env:X}",
		"marker-4":         "****** (stored in clear)",
		"encrypted:v1:bad": "****** (malformed",
	} {
		if got := Mask(v); !strings.HasPrefix(got, want) || strings.Contains(got, "marker-4") {
			t.Errorf("Mask(%q) = %q", v, got)
		}
	}
	got := InClear(map[string]string{"sasl.password": "old", "sasl.username": "u", "ssl.key.password": sealed})
	if strings.Join(got, ",") != "sasl.password" {
		t.Fatalf("InClear = %v", got)
	}
}

func FuzzParseSealed(f *testing.F) {
	k := keyring(f, "k1="+newKey(f))
	sealed, _ := k.Seal("m", "sasl.password", "pw")
	f.Add(sealed)
	f.Add("encrypted:v1:k1:")
	f.Add("encrypted:v2:k1:AAAA")
	f.Add("encrypted:v1::AAAA")
	f.Add("${file:/a:b}")
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseSealed(v)
		if err != nil {
			return
		}
		if s.String() != v {
			t.Fatalf("round trip: %q -> %q", v, s.String())
		}
		// Whatever parses must fail to open unless it is genuine, and never panic.
		if got, err := k.Open("m", "sasl.password", v); err == nil && v != sealed {
			t.Fatalf("forged value opened to %q", got)
		}
	})
}

func FuzzParseReference(f *testing.F) {
	for _, s := range []string{"${file:/a/b.properties:k}", "${env:X}", "${directory:/d:f}", "${file:C:/x:k}", "${vault:x}", "${env:}", "${}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, err := ParseReference(v)
		if err != nil {
			return
		}
		again, err := ParseReference(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", v, r, r.String(), again, err)
		}
	})
}
