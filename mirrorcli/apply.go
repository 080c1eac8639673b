package mirrorcli

// --apply, --diff and --export: mirrors as code (docs/mirrors-as-code.md).
// They use the same RPCs as the other actions, so the proxy's authorisation
// holds: a principal without ALTER on CLUSTER can --diff and --export (they
// only read) but --apply gets the proxy's refusal of its first change.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	pluralpkg "github.com/kmirror/kmirror/internal/plural"
)

// readMirrorsFile reads and checks -f FILE.
func readMirrorsFile(path string) (*MirrorsFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("-f: %v", err)
	}
	f, err := ParseMirrorsFile(path, data)
	if err != nil {
		return nil, &UsageError{err.Error()}
	}
	return f, nil
}

// diff prints the plan: one line per change, destructive ones marked, then
// what is left as is.
func (p *plan) print(r *runner) {
	for _, c := range p.changes {
		fmt.Fprintln(r.out, c.text)
	}
	for _, n := range p.notes {
		fmt.Fprintln(r.out, "  note: "+n)
	}
	for _, e := range p.errs {
		fmt.Fprintln(r.errw, "error: "+e)
	}
}

func (r *runner) planFor(ctx context.Context, f *MirrorsFile) (*plan, error) {
	observed, err := r.observe(ctx)
	if err != nil {
		return nil, err
	}
	return makePlan(f, observed), nil
}

func (r *runner) diff(ctx context.Context, f *MirrorsFile) error {
	p, err := r.planFor(ctx, f)
	if err != nil {
		return err
	}
	if len(p.changes) == 0 && len(p.errs) == 0 {
		fmt.Fprintf(r.out, "No changes: the mirrors are as %s declares.\n", r.a.File)
	}
	p.print(r)
	if len(p.errs) > 0 {
		return fmt.Errorf("%s cannot be applied: %s", r.a.File, plural(len(p.errs), "problem"))
	}
	if d := p.destructive(); len(d) > 0 {
		fmt.Fprintf(r.out, "%s marked - or ! above %s --allow-destructive to apply.\n", plural(len(d), "change"), map[bool]string{true: "needs", false: "need"}[len(d) == 1])
	}
	return nil
}

// apply checks the whole plan before it changes anything: a file that asks
// for something impossible, or for a destructive change without
// --allow-destructive, changes nothing.
func (r *runner) apply(ctx context.Context, f *MirrorsFile) error {
	p, err := r.planFor(ctx, f)
	if err != nil {
		return err
	}
	if len(p.errs) > 0 {
		p.print(r)
		return fmt.Errorf("%s cannot be applied: %s; nothing was changed", r.a.File, plural(len(p.errs), "problem"))
	}
	if d := p.destructive(); len(d) > 0 && !r.a.AllowDestructive {
		return fmt.Errorf("refusing %s without --allow-destructive; nothing was changed:\n  %s",
			plural(len(d), "destructive change"), strings.Join(d, "\n  "))
	}
	if len(p.changes) == 0 {
		fmt.Fprintf(r.out, "No changes: the mirrors are as %s declares.\n", r.a.File)
	}
	for i, c := range p.changes {
		fmt.Fprintln(r.out, c.text)
		if err := c.run(ctx, r); err != nil {
			return fmt.Errorf("%w; %d of %s applied before it (--diff shows what is left)", err, i, plural(len(p.changes), "change"))
		}
	}
	for _, n := range p.notes {
		fmt.Fprintln(r.out, "  note: "+n)
	}
	if len(p.changes) > 0 {
		fmt.Fprintf(r.out, "Applied %s.\n", plural(len(p.changes), "change"))
	}
	return nil
}

// exportHeader heads an exported file.
const exportHeader = `kmirror mirrors file (kmirror mirrors --export from %s, %s).
Apply with: kmirror mirrors --bootstrap-server PROXY --apply -f FILE
Secrets are never exported (the proxy does not return them): each one is an
${env:...} reference to fill in or replace with ${file:...} before applying to
another proxy (docs/mirrors-as-code.md).`

func (r *runner) export(ctx context.Context) error {
	observed, err := r.observe(ctx)
	if err != nil {
		return err
	}
	out, err := MarshalMirrorsFile(exportFile(observed), fmt.Sprintf(exportHeader, r.a.Bootstrap, time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		return err
	}
	if r.a.File == "" || r.a.File == "-" {
		_, err = r.out.Write(out)
		return err
	}
	if err := os.WriteFile(r.a.File, out, 0o644); err != nil {
		return fmt.Errorf("--export: %w", err)
	}
	fmt.Fprintf(r.out, "Wrote %s of %s to %s.\n", plural(len(observed), "mirror"), r.a.Bootstrap, r.a.File)
	return nil
}

// pluralWord is word, with an s unless n is 1.
func pluralWord(n int, word string) string { return pluralpkg.Word(n, word) }
