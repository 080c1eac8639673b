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
