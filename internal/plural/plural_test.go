package plural

import (
	"testing"

	"go.uber.org/goleak"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 topics"}, {1, "1 topic"}, {2, "2 topics"}, {-1, "-1 topics"}} {
		if got := Of(c.n, "topic"); got != c.want {
			t.Errorf("Of(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if Word(1, "mirror") != "mirror" || Word(3, "mirror") != "mirrors" {
		t.Error("Word")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
