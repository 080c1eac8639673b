package instance

import "testing"

func TestSuperUser(t *testing.T) {
	for _, c := range []struct {
		list string
		want bool
	}{
		{"User:admin;User:kmirror", true},
		{" User:kmirror ", true},
		{"User:admin; User:kmirror", true},
		{"User:kmirror2;User:admin", false},
		{"User:Kmirror", false},
		{"", false},
	} {
		if got := superUser(c.list, "User:kmirror"); got != c.want {
			t.Errorf("superUser(%q) = %v, want %v", c.list, got, c.want)
		}
	}
}
