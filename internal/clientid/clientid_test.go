package clientid

import "testing"

func TestIDs(t *testing.T) {
	if got := Source("dr", ""); got != "kmirror-dr" {
		t.Errorf("Source default %q", got)
	}
	if got := Source("dr", "ops-dr"); got != "ops-dr" {
		t.Errorf("Source override %q", got)
	}
	if got := Writer("dr"); got != "kmirror-dr-writer" {
		t.Errorf("Writer %q", got)
	}
	for _, id := range []string{State, Admin, Identities, Writer("a.b_c-d")} {
		if err := Check(id); err != nil {
			t.Errorf("kmirror's own id %q fails Check: %v", id, err)
		}
	}
}
