// Command gen writes protocol/generated.go, the mirror RPC messages, from
// the definition files in protocol/definitions (parse.go describes their
// language). protocol's go:generate runs it; `make lint` runs it with
// -check, which fails when generated.go is not what the definitions give.
//
// Like franz-go's generate/ for kmsg, the definitions say what is on the
// wire (fields, types, versions, tags, defaults, doc comments) and the
// generator turns that into types and methods; unlike it, the encoding
// itself stays in hand-written helpers (protocol/codec.go).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	defsDir := flag.String("defs", "definitions", "folder of *.def files")
	out := flag.String("out", "generated.go", "file to write")
	checkOnly := flag.Bool("check", false, "write nothing; fail if -out differs from what the definitions give")
	flag.Parse()
	if err := run(*defsDir, *out, *checkOnly); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(defsDir, out string, checkOnly bool) error {
	src, err := generateDir(defsDir, out)
	if err != nil {
		return err
	}
	if !checkOnly {
		return os.WriteFile(out, src, 0o644)
	}
	have, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("reading the generated file: %w", err)
	}
	if !bytes.Equal(have, src) {
		return fmt.Errorf("%s is stale or edited by hand: it differs from what %s gives; run go generate ./protocol", out, defsDir)
	}
	return nil
}

// generateDir reads every *.def file of dir, in name order, and returns
// the source to write to out.
func generateDir(dir, out string) ([]byte, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.def"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no *.def files in %s", dir)
	}
	sort.Strings(names)
	defs := new(definitions)
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		if err := parseFile(defs, filepath.Base(name), string(src)); err != nil {
			return nil, err
		}
	}
	if err := check(defs); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(filepath.Dir(out), dir)
	if err != nil {
		rel = dir
	}
	return generate(defs, filepath.ToSlash(rel)+"/*.def")
}
