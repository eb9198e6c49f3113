// Package statuspage serves Floodgate's live status page: the loaded rules,
// decisions per second per rule, the keys rejected most, and the counter
// store's health.
//
// The page is self-contained (HTML, CSS and JavaScript embedded in the
// binary, nothing fetched from elsewhere) and polls a JSON feed once a second
// to update in place; its chart of decisions per second starts from the
// server's history of the last hour, so what happened before the page was
// opened can be seen. Everything drawn from requests, such as rejected keys,
// is inserted as text, never as markup.
package statuspage

import (
	"embed"
	"encoding/json"
	"net/http"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/rules"
)

// Source is what the page shows: the rules in force and the recorder's
// current figures. Both methods are called once per poll and must be safe
// for concurrent use.
type Source interface {
	Rules() []rules.RuleInfo
	Snapshot() metrics.Snapshot
}

// HistorySource is a Source that also keeps a history of decisions; the
// page then starts its chart from it (history.json) when it is opened.
type HistorySource interface {
	Source
	History() []metrics.Point
}

// HistoryFeed is the JSON document served at history.json.
type HistoryFeed struct {
	// StepSeconds is the span of one point.
	StepSeconds float64 `json:"step_s"`
	// Points are the decisions of each step, oldest first.
	Points []metrics.Point `json:"points"`
}

// Feed is the JSON document served at status.json.
type Feed struct {
	// Rules lists the rules in force, in file order.
	Rules []rules.RuleInfo `json:"rules"`
	// Metrics holds the recent figures.
	Metrics metrics.Snapshot `json:"metrics"`
}

//go:embed assets
var assets embed.FS

// files maps the page's paths to their embedded file and content type.
var files = map[string][2]string{
	"/":           {"assets/index.html", "text/html; charset=utf-8"},
	"/index.html": {"assets/index.html", "text/html; charset=utf-8"},
	"/status.css": {"assets/status.css", "text/css; charset=utf-8"},
	"/status.js":  {"assets/status.js", "text/javascript; charset=utf-8"},
}

// csp allows the page its own script, style and feed and nothing else.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns the status page handler. It serves the page at "/" (with
// its script and style beside it), the feed at "/status.json" and, when
// src is a HistorySource, the history at "/history.json"; other paths get
// 404. Mount it at the root, or under a prefix with
// http.StripPrefix (the page fetches its parts by relative URL).
func Handler(src Source) http.Handler {
	return &handler{src: src}
}

type handler struct{ src Source }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == "" {
		path = "/"
	}
	hs, hasHistory := h.src.(HistorySource)
	if path != "/status.json" && (path != "/history.json" || !hasHistory) {
		if _, ok := files[path]; !ok {
			http.NotFound(w, r)
			return
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the status page is read-only", http.StatusMethodNotAllowed)
		return
	}
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Security-Policy", csp)
	hdr.Set("Referrer-Policy", "no-referrer")
	if path == "/status.json" {
		h.serveFeed(w, r)
		return
	}
	if path == "/history.json" {
		serveJSON(w, r, HistoryFeed{StepSeconds: metrics.HistoryStep.Seconds(), Points: hs.History()})
		return
	}
	f := files[path]
	b, err := assets.ReadFile(f[0])
	if err != nil {
		http.Error(w, "status page asset missing: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hdr.Set("Content-Type", f[1])
	hdr.Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	w.Write(b)
}

func (h *handler) serveFeed(w http.ResponseWriter, r *http.Request) {
	serveJSON(w, r, BuildFeed(h.src))
}

// serveJSON answers with v as JSON, which no cache may keep.
func serveJSON(w http.ResponseWriter, r *http.Request, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodHead {
		return
	}
	json.NewEncoder(w).Encode(v)
}

// BuildFeed gathers the feed from src.
func BuildFeed(src Source) Feed {
	feed := Feed{Rules: src.Rules(), Metrics: src.Snapshot()}
	if feed.Rules == nil {
		feed.Rules = []rules.RuleInfo{}
	}
	return feed
}
