// Package statuspage serves the status page at / on an instance's metrics
// address: every mirror with its topics and partitions (state, lag, records
// and seconds at risk), sync jobs and their age, the instances and what each
// owns, and charts of throughput and lag over the last hour.
//
// The page is read-only and renders from the last sample, never from a live
// call: a page load costs the clusters nothing, however often it is loaded
// and by whom. A sample (every 10 s) is what DescribeMirrors answers plus a
// DescribeGroups of the coordinators' group; the history behind the charts
// is a bounded ring in memory (an hour of samples). The HTML is rendered on
// the server from embedded templates, with inline SVG charts: no scripts, no
// build step, no external requests (the Content-Security-Policy forbids
// them).
package statuspage

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kmirror/kmirror/coordinator"
	"github.com/kmirror/kmirror/protocol"
)

// Status is what one sample reads.
type Status struct {
	// Mirrors is what DescribeMirrors answers for every mirror (configs are
	// not part of it, so no secret can reach the page).
	Mirrors []protocol.DescribeMirrorsResponseMirror
	// Instances is the coordinators' group; nil when it could not be read.
	Instances []coordinator.Member
	// InstancesError says why Instances is missing.
	InstancesError string
	// Routes are this instance's application routes and their switches
	// (docs/cutover.md), as DescribeMirrors answers them.
	Routes []protocol.DescribeMirrorsResponseRoute
}

// Source reads a sample; the instance implements it over its DescribeMirrors
// handler and its coordinator.
type Source interface {
	Status(ctx context.Context) (Status, error)
}

// Defaults: a sample every 10 s, an hour of them.
const (
	DefaultEvery   = 10 * time.Second
	DefaultHistory = time.Hour
	sampleTimeout  = 30 * time.Second
)

// Config configures a Page.
type Config struct {
	Source  Source
	Every   time.Duration // between samples; DefaultEvery when 0
	History time.Duration // what the charts show; DefaultHistory when 0
	Logger  *slog.Logger
}

// Page samples its Source and serves the page.
type Page struct {
	cfg Config
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	last    *Status // nil until the first sample
	lastAt  time.Time
	lastErr error
	hist    *history
}

// New returns a page; Run samples, Handler serves.
func New(cfg Config) *Page {
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Page{cfg: cfg, log: cfg.Logger, now: time.Now, hist: newHistory(int(cfg.History / cfg.Every))}
}

// Run samples every cfg.Every until ctx ends.
func (p *Page) Run(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Every)
	defer tick.Stop()
	for {
		p.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (p *Page) sample(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	st, err := p.cfg.Source.Status(sctx)
	if ctx.Err() != nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		// The last good sample stays on the page, with its age and why it
		// is not newer.
		p.lastErr = err
		p.log.Warn("status page: sample failed", "err", err)
		return
	}
	p.last, p.lastAt, p.lastErr = &st, now, nil
	p.hist.add(now, st.Mirrors)
}
