package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), nil, &out, &errOut); code != 2 {
		t.Fatalf("no command: exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "version") {
		t.Fatalf("help does not list the version command:\n%s", errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"no-such-command"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), `unknown command "no-such-command"`) {
		t.Fatalf("unknown command not named:\n%s", errOut.String())
	}
}

func TestVersionString(t *testing.T) {
	if v := versionString(); !strings.HasPrefix(v, "kmirror ") {
		t.Fatalf("version string %q", v)
	}
}

// What `make release` stamps in is what `kmirror version` prints
// (scripts/release-check.sh checks the built binaries too).
func TestVersionStringStamped(t *testing.T) {
	old := [3]string{version, commit, date}
	defer func() { version, commit, date = old[0], old[1], old[2] }()
	version, commit, date = "v1.2.3", "0123456789ab", "2026-01-02T03:04:05Z"
	if v, want := versionString(), "kmirror v1.2.3 (commit 0123456789ab, built 2026-01-02T03:04:05Z, go"; !strings.HasPrefix(v, want) {
		t.Fatalf("version string %q, want prefix %q", v, want)
	}
}
