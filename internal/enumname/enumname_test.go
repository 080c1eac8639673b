package enumname

import "testing"

type color int8

var colorNames = []string{1: "red", 2: "green"}

func TestOf(t *testing.T) {
	for _, c := range []struct {
		v    color
		want string
	}{
		{1, "red"},
		{2, "green"},
		{0, "color(0)"},   // gap in the table
		{3, "color(3)"},   // past the end
		{-1, "color(-1)"}, // negative
	} {
		if got := Of(c.v, "color", colorNames); got != c.want {
			t.Errorf("Of(%d) = %q, want %q", c.v, got, c.want)
		}
	}
}
