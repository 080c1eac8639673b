package instance

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kmirror/kmirror/proxy"
)

// The key file comes from the proxy config (secrets_key_file); a malformed
// one stops the instance with an error naming the line, never key material.
func TestSecretsKeyFileFromProxyConfig(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "secrets.keys")
	yaml := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(yaml, []byte("upstream: [b1:9092]\nsecrets_key_file: "+keys+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg proxy.Config
	if err := proxy.LoadFile(yaml, &cfg); err != nil || cfg.SecretsKeyFile != keys {
		t.Fatalf("secrets_key_file: %q, %v", cfg.SecretsKeyFile, err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, err := secretsResolver(keys, log); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing key file: %v", err)
	}
	const material = "c2hvcnQga2V5IG1hdGVyaWFs"
	if err := os.WriteFile(keys, []byte("new="+material+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secretsResolver(keys, log); err == nil || !strings.Contains(err.Error(), "line 1") || strings.Contains(err.Error(), material) {
		t.Fatalf("malformed key file: %v", err)
	}
	if err := os.WriteFile(keys, []byte("new=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\nold=ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := secretsResolver(keys, log)
	if err != nil || r.Keys().Current() != "new" || strings.Join(r.Keys().IDs(), ",") != "new,old" {
		t.Fatalf("key file: %v", err)
	}
	if r, err := secretsResolver("", log); err != nil || r.Keys() != nil {
		t.Fatalf("no key file: %v", err)
	}
}
