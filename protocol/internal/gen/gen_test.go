package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestGeneratedIsCurrent is the in-test twin of `make lint`'s -check: each
// checked-in output is what its definitions give (the pairs that
// protocol's generate directives name).
func TestGeneratedIsCurrent(t *testing.T) {
	for defs, out := range map[string]string{
		"definitions":          "generated.go",
		"testdata/describe_v0": "describe_v0_generated_test.go",
	} {
		src, err := generateDir("../../"+defs, "../../"+out)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile("../../" + out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, have) {
			t.Errorf("protocol/%s is stale: run go generate ./protocol", out)
		}
		if !bytes.HasPrefix(src, fmt.Appendf(nil, header, defs+"/*.def")) {
			t.Errorf("protocol/%s lacks the generated-code header", out)
		}
	}
}

func TestCheckModeFailsOnStale(t *testing.T) {
	out := t.TempDir() + "/generated.go"
	if err := os.WriteFile(out, []byte("package protocol\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("../../definitions", out, true); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("-check on a stale file: %v", err)
	}
	if err := run("../../definitions", out, false); err != nil {
		t.Fatal(err)
	}
	if err := run("../../definitions", out, true); err != nil {
		t.Fatalf("-check right after generating: %v", err)
	}
}

const goodAPI = `// Ping answers.
api Ping key 1000 versions 0 flexible 0+

struct PingRequest request
  Name: string

struct PingResponse response
  ThrottleMillis: int32
`

// TestBadDefinitions: every mistake gets an error naming file and line.
func TestBadDefinitions(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"unknown line", "bogus\n", "a.def:1: unknown line"},
		{"unknown type", "struct A\n  X: float\n", `a.def:2: unknown type "float"`},
		{"bad array", "struct A\n  X: [int64]\n", "arrays of int64 are not supported"},
		{"field outside struct", "  X: int32\n", "a.def:1: indented field outside a struct"},
		{"lower-case field", "struct A\n  x: int32\n", `field name "x"`},
		{"reserved field", "struct A\n  Version: int16\n", `field name "Version"`},
		{"no type", "struct A\n  X:\n", "field X has no type"},
		{"no colon", "struct A\n  X int32\n", `want "Name: type"`},
		{"tag too big", "struct A\n  X: int32 tag 64\n", "tag \"64\": want a number from 0 to 63"},
		{"array default", "struct A\n  X: [string] = nil\n", "arrays cannot have a default"},
		{"as on a string", "struct A\n  X: string as Name\n", `"as" names a Go type for an integer field`},
		{"trailing words", "struct A\n  X: int32 extra\n", `unexpected "extra"`},
		{"bad api line", "api Ping key 1000\n", `want "api NAME key K versions`},
		{"not flexible", "api Ping key 1000 versions 0-1 flexible 1+\n", "must be flexible from v0"},
		{"versions reversed", "api Ping key 1000 versions 2-1 flexible 2+\n", "the first is above the last"},
		{"key too big", "api Ping key 40000 versions 0 flexible 0+\n", `key "40000"`},
		{"request without api", "struct PingRequest request\n", "no api line comes before it"},
		{"request misnamed", "api Ping key 1000 versions 0 flexible 0+\nstruct Pong request\n", "must be named PingRequest"},
		{"dangling comment", "struct A\n  X: int32\n// nothing\n", "documents nothing"},
		{"comment parted from field", "struct A\n  // X\n\n", "blank line after a field comment"},
		{"indented comment outside", "  // X\n", "indented comment outside a struct"},
		{"field after margin comment", "struct A\n// B\n  X: int32\n", "indented field outside a struct"},
		{"comment parted from api", "// Ping\n\napi Ping key 1000 versions 0 flexible 0+\n", "parts the api line from its comment"},
		{"two apis", goodAPI + "\napi Pong key 1001 versions 0 flexible 0+\n", "one file per API"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := parseFile(new(definitions), "a.def", c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestBadReferences: what only the whole set of definitions can tell.
func TestBadReferences(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"missing struct", goodAPI + "\nstruct A\n  X: [B]\n", "no struct B is defined"},
		{"message as element", goodAPI + "\nstruct A\n  X: [PingRequest]\n", "PingRequest is a request, not an element"},
		{"duplicate field", goodAPI + "\nstruct A\n  X: int32\n  X: int16\n", "field X appears twice"},
		{"duplicate tag", goodAPI + "\nstruct A\n  X: int32 tag 1\n  Y: int16 tag 1\n", "tag 1 appears twice"},
		{"duplicate struct", goodAPI + "\nstruct A\n\nstruct A\n", "struct A is defined twice"},
		{"no throttle", strings.Replace(goodAPI, "ThrottleMillis: int32", "ErrorCode: int16", 1), "must start with \"ThrottleMillis: int32\""},
		{"no response", strings.Split(goodAPI, "struct PingResponse")[0], "needs a struct PingRequest request and a struct PingResponse response"},
	} {
		t.Run(c.name, func(t *testing.T) {
			defs := new(definitions)
			err := parseFile(defs, "a.def", c.src)
			if err == nil {
				err = check(defs)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestKeysMustBeContiguous(t *testing.T) {
	defs := new(definitions)
	for i, src := range []string{goodAPI, strings.NewReplacer("Ping", "Pong", "1000", "1002").Replace(goodAPI)} {
		if err := parseFile(defs, string(rune('a'+i))+".def", src); err != nil {
			t.Fatal(err)
		}
	}
	if err := check(defs); err == nil || !strings.Contains(err.Error(), "keys must be contiguous") {
		t.Fatalf("got %v", err)
	}
}

// TestTaggedPresence: each kind of tagged field is written exactly when it
// is not at its default.
func TestTaggedPresence(t *testing.T) {
	src := goodAPI + `
struct A
  B: bool tag 0
  S: string tag 1
  N: nullable-string tag 2
  U: uuid tag 3
  I: int16 tag 4
  D: int64 = -1 tag 5
  L: [int32] tag 6
`
	defs := new(definitions)
	if err := parseFile(defs, "a.def", src); err != nil {
		t.Fatal(err)
	}
	if err := check(defs); err != nil {
		t.Fatal(err)
	}
	out, err := generate(defs, "a")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(out)), " ")
	for _, want := range []string{
		"taggedField{0, v.B,", `taggedField{1, v.S != "",`, "taggedField{2, v.N != nil,",
		"taggedField{3, v.U != [16]byte{},", "taggedField{4, v.I != 0,", "taggedField{5, v.D != -1,",
		"taggedField{6, len(v.L) > 0,", "func (v *A) smallest()", "v.D = -1 // absent means the default",
		"func NewA() A {", "I int16 // tag 4",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("generated code lacks %q", want)
		}
	}
}

// FuzzParseFile: no input panics the parser or the checks, and every
// error names the file.
func FuzzParseFile(f *testing.F) {
	f.Add(goodAPI)
	f.Add("struct A\n  X: int8 as T = 3 tag 2 // c\n")
	for _, name := range []string{"1005_describe_mirrors.def", "shared.def"} {
		if src, err := os.ReadFile("../../definitions/" + name); err == nil {
			f.Add(string(src))
		}
	}
	f.Fuzz(func(t *testing.T, src string) {
		defs := new(definitions)
		err := parseFile(defs, "f.def", src)
		if err == nil {
			err = check(defs)
		}
		if err != nil && !strings.Contains(err.Error(), ".def") {
			t.Fatalf("error without a position: %v", err)
		}
	})
}
