package statuspage

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"time"
)

//go:embed assets
var assets embed.FS

var pageTemplate = template.Must(template.ParseFS(assets, "assets/page.html"))

// csp allows the page its own stylesheet and icon and nothing else: no
// scripts at all, no request leaves for another origin.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at / and its assets under /static/, GET (and
// HEAD) only: anything else is 405, any other path 404.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.serveIndex)
	// Only the assets the page links; the template is not served.
	for _, name := range []string{"style.css", "favicon.svg"} {
		mux.HandleFunc("GET /static/"+name, func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, assets, "assets/"+name)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func (p *Page) serveIndex(w http.ResponseWriter, _ *http.Request) {
	v := p.view()
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, v); err != nil {
		p.log.Error("status page: rendering", "err", err)
		http.Error(w, "rendering the status page failed (logged)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// view builds the page's data from the last sample under the lock.
func (p *Page) view() view {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	refresh := int(max(p.cfg.Every, time.Second) / time.Second)
	if p.last == nil {
		v := view{Collecting: true, Refresh: refresh, Updated: "never"}
		if p.lastErr != nil {
			v.Stale = p.lastErr.Error()
		}
		return v
	}
	since := now.Sub(p.lastAt)
	v := newView(p.last, since)
	v.Refresh = refresh
	v.Updated = p.lastAt.UTC().Format("15:04:05 UTC") + " (" + duration(since) + " ago)"
	if p.lastErr != nil {
		v.Stale = "the last sample failed: " + p.lastErr.Error()
	}
	v.Charts = charts(p.hist.series(), now, p.cfg.History)
	return v
}
