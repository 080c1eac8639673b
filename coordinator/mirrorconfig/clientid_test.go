package mirrorconfig

import (
	"strings"
	"testing"
)

func TestSourceClientID(t *testing.T) {
	base := func(id string) map[string]string {
		return map[string]string{"bootstrap.servers": "s:1", "source.client.id": id}
	}
	if err := Validate(base("team-eu_mirror.1")); err != nil {
		t.Fatalf("valid client id refused: %v", err)
	}
	if got := Parse(base("team-eu_mirror.1")).SourceClientID; got != "team-eu_mirror.1" {
		t.Fatalf("parsed source.client.id %q", got)
	}
	if got := Parse(map[string]string{"bootstrap.servers": "s:1"}).SourceClientID; got != "" {
		t.Fatalf("source.client.id without a value parses as %q, want empty (the default kmirror-<mirror>)", got)
	}
	for _, bad := range []string{"", "a b", "${file:/x:id}", "ü", strings.Repeat("a", 256)} {
		err := Validate(base(bad))
		if err == nil || !strings.Contains(err.Error(), "source.client.id") || !strings.Contains(err.Error(), "1 to 255 characters") {
			t.Errorf("source.client.id=%q: error %v, want it named with what is expected", bad, err)
		}
	}
	if got := DefaultFor("dr", "source.client.id"); got != "kmirror-dr" {
		t.Fatalf("source.client.id of mirror dr defaults to %q", got)
	}
	if DefaultFor("dr", "fetch.max.bytes") != Default("fetch.max.bytes") {
		t.Fatal("DefaultFor differs from Default for a key that does not derive from the name")
	}
	// Fixed once the mirror exists: the source client is built from it and a
	// quota operators set names it.
	if !IsConnection("source.client.id") {
		t.Fatal("source.client.id can change while the mirror runs")
	}
}
