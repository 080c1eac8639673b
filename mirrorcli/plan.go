package mirrorcli

// The plan: what --apply would change to make the mirrors what a file
// declares, as --diff prints it. Changes that take data away from the
// mirrors (pause, fail over, delete) are marked destructive; apply refuses
// them unless --allow-destructive is given.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kmirror/kmirror/coordinator/mirrorconfig"
	"github.com/kmirror/kmirror/protocol"
)

// change is one step of a plan.
type change struct {
	text        string // "+ create mirror dr", as --diff prints it
	destructive bool
	run         func(ctx context.Context, r *runner) error
}

// plan is what apply does, in order, and what it leaves alone with why.
type plan struct {
	changes []change
	notes   []string // left as is: mirrors and topics the file does not name
	errs    []string // what the file asks for and no apply can do
}

func (p *plan) add(destructive bool, run func(context.Context, *runner) error, format string, args ...any) {
	p.changes = append(p.changes, change{text: fmt.Sprintf(format, args...), destructive: destructive, run: run})
}

// makePlan compares the file with what exists.
func makePlan(f *MirrorsFile, observed map[string]*observedMirror) *plan {
	p := &plan{}
	declared := map[string]bool{}
	for i := range f.Mirrors {
		m := &f.Mirrors[i]
		declared[m.Name] = true
		switch om := observed[m.Name]; {
		case m.Deleted && om != nil:
			p.planDelete(om)
		case m.Deleted:
		case om == nil:
			p.planCreate(m)
		default:
			p.planConfigs(m, om)
			p.planTopics(m, om)
		}
	}
	for _, name := range sortedKeys(observed) {
		if !declared[name] {
			p.notes = append(p.notes, fmt.Sprintf("mirror %s exists but is not in the file: left as is (declare it with deleted: true to delete it)", name))
		}
	}
	return p
}

// sub is a runner for one mirror's step, sharing r's connection and output.
func (r *runner) sub(mirror string, set func(a *MirrorsArgs)) *runner {
	a := &MirrorsArgs{Mirror: mirror, Bootstrap: r.a.Bootstrap, Timeout: r.a.Timeout}
	if set != nil {
		set(a)
	}
	return &runner{a: a, c: r.c, out: r.out, errw: r.errw}
}

func (p *plan) planCreate(m *MirrorSpec) {
	desired := m.DesiredConfigs()
	var shown []string
	var configs []protocol.CreateMirrorRequestConfig
	for _, k := range sortedKeys(desired) {
		configs = append(configs, protocol.CreateMirrorRequestConfig{Name: k, Value: strPtr(desired[k])})
		shown = append(shown, k+"="+desired[k]) // secrets are references here, never values
	}
	name := m.Name
	p.add(false, func(ctx context.Context, r *runner) error { return r.sub(name, nil).create(ctx, configs) },
		"+ create mirror %s (%s)", name, strings.Join(shown, ", "))
	if len(m.Topics) > 0 {
		p.planAdd(name, m.Topics)
	}
	if len(m.Paused) > 0 {
		p.planPause(name, m.Paused)
	}
}

func (p *plan) planAdd(mirror string, topics []string) {
	p.add(false, func(ctx context.Context, r *runner) error {
		return r.sub(mirror, func(a *MirrorsArgs) { a.Topics = TopicSelection{Names: topics} }).add(ctx)
	}, "+ mirror %s: add %s %s", mirror, pluralWord(len(topics), "topic"), strings.Join(topics, ", "))
}

func (p *plan) planPause(mirror string, topics []string) {
	p.add(true, func(ctx context.Context, r *runner) error {
		return r.sub(mirror, func(a *MirrorsArgs) { a.Action, a.Topics = ActPause, TopicSelection{Names: topics} }).pauseResume(ctx)
	}, "! mirror %s: pause %s %s (copying stops)", mirror, pluralWord(len(topics), "topic"), strings.Join(topics, ", "))
}

// planConfigs sets the configs that differ and puts back to their defaults
// those set on the mirror that the file leaves out. The keys naming the
// source cannot change on an existing mirror, and secrets cannot be compared
// (the proxy never returns them).
func (p *plan) planConfigs(m *MirrorSpec, om *observedMirror) {
	desired := m.DesiredConfigs()
	var set []KV
	var reset, lines []string
	for _, k := range sortedKeys(desired) {
		have, want := om.configs[k], strings.TrimSpace(desired[k])
		switch {
		case have.sensitive || strings.TrimSpace(have.value) == want:
		case mirrorconfig.IsConnection(k):
			p.errs = append(p.errs, fmt.Sprintf("mirror %s: %s is %q, the file says %q: the keys naming the source cannot change on an existing mirror; delete and re-create it (deleted: true, then declare it again)",
				m.Name, k, have.value, want))
		default:
			set = append(set, KV{k, want})
			lines = append(lines, fmt.Sprintf("~ mirror %s: config %s: %s -> %s", m.Name, k, shownValue(have.value), want))
		}
	}
	for _, k := range sortedKeys(om.configs) {
		c := om.configs[k]
		if _, declared := desired[k]; declared || !c.set || c.sensitive || mirrorconfig.IsConnection(k) {
			continue
		}
		reset = append(reset, k)
		lines = append(lines, fmt.Sprintf("~ mirror %s: config %s: %s -> default %s", m.Name, k, shownValue(c.value), shownValue(mirrorconfig.DefaultFor(m.Name, k))))
	}
	if len(lines) == 0 {
		return
	}
	name := m.Name
	p.add(false, func(ctx context.Context, r *runner) error {
		return r.sub(name, func(a *MirrorsArgs) { a.AddConfig, a.DeleteConfig = set, reset }).alter(ctx, nil)
	}, "%s", strings.Join(lines, "\n"))
}

func shownValue(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

func (p *plan) planTopics(m *MirrorSpec, om *observedMirror) {
	var add, pause, resume, failover []string
	for _, t := range m.Topics {
		st, ok := om.topics[t]
		switch {
		case !ok:
			add = append(add, t)
		case st == topicFailedOver:
			p.errs = append(p.errs, fmt.Sprintf("mirror %s: topic %s was failed over and cannot mirror again; move it to failed_over", m.Name, t))
		case st == topicPaused && !slices.Contains(m.Paused, t):
			resume = append(resume, t)
		}
	}
	for _, t := range m.Paused {
		if st, ok := om.topics[t]; !ok || st == topicMirroring {
			pause = append(pause, t)
		}
	}
	for _, t := range m.FailedOver {
		if st, ok := om.topics[t]; ok && st != topicFailedOver {
			failover = append(failover, t)
		}
	}
	p.noteUndeclared(m, om)
	if len(add) > 0 {
		p.planAdd(m.Name, add)
	}
	if len(resume) > 0 {
		p.planResume(m.Name, resume)
	}
	if len(pause) > 0 {
		p.planPause(m.Name, pause)
	}
	if len(failover) > 0 {
		p.planFailover(m.Name, failover, false)
	}
}

func (p *plan) planResume(mirror string, topics []string) {
	p.add(false, func(ctx context.Context, r *runner) error {
		return r.sub(mirror, func(a *MirrorsArgs) { a.Action, a.Topics = ActResume, TopicSelection{Names: topics} }).pauseResume(ctx)
	}, "~ mirror %s: resume %s %s", mirror, pluralWord(len(topics), "topic"), strings.Join(topics, ", "))
}

// planFailover fails topics over; wait (before a delete) waits until they
// are STOPPED.
func (p *plan) planFailover(mirror string, topics []string, wait bool) {
	p.add(true, func(ctx context.Context, r *runner) error {
		return r.sub(mirror, func(a *MirrorsArgs) { a.Topics, a.Wait = TopicSelection{Names: topics}, wait }).remove(ctx)
	}, "- mirror %s: fail over %s %s (they stop mirroring for good and become writable)", mirror, pluralWord(len(topics), "topic"), strings.Join(topics, ", "))
}

// noteUndeclared names the topics the mirror has and the file does not: apply
// leaves them as they are (only failed_over fails a topic over).
func (p *plan) noteUndeclared(m *MirrorSpec, om *observedMirror) {
	matcher := mirrorconfig.NewMatcher(m.Patterns, nil)
	for _, t := range sortedKeys(om.topics) {
		if om.topics[t] == topicFailedOver || slices.Contains(m.Topics, t) || (len(m.Patterns) > 0 && matcher.Match(t)) {
			continue
		}
		p.notes = append(p.notes, fmt.Sprintf("mirror %s: topic %s is mirrored but not in the file: left as is (list it in topics, or in failed_over to fail it over)", m.Name, t))
	}
}

func (p *plan) planDelete(om *observedMirror) {
	var live []string
	for _, t := range sortedKeys(om.topics) {
		if om.topics[t] != topicFailedOver {
			live = append(live, t)
		}
	}
	if len(live) > 0 {
		p.planFailover(om.name, live, true)
	}
	name := om.name
	p.add(true, func(ctx context.Context, r *runner) error { return r.sub(name, nil).delete(ctx) }, "- delete mirror %s", name)
}

// destructive lists the plan's destructive changes.
func (p *plan) destructive() []string {
	var out []string
	for _, c := range p.changes {
		if c.destructive {
			out = append(out, c.text)
		}
	}
	return out
}
