package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/statuspage"
	"github.com/floodgate-dev/floodgate/rules"
)

// ListenerAdmin names the optional admin listener, for Addr.
const ListenerAdmin = "admin"

// Admin configures who may see the admin endpoints: GET /v1/rules, the
// status page and /status.json, /metrics and /debug/pprof/. See
// default.yaml.
type Admin struct {
	// Addr, when set, moves the admin endpoints to their own listener; "off"
	// (the default) serves them on the http listener.
	Addr string `yaml:"addr"`
	TLS  TLS    `yaml:"tls"`
	// TokenFile or TokenEnv (at most one) hold a bearer token the admin
	// endpoints then require: "Authorization: Bearer <token>".
	TokenFile string `yaml:"token_file"`
	TokenEnv  string `yaml:"token_env"`
	// ShowKeyValues shows sensitive entry values in counter keys and rule
	// listings instead of masking them.
	ShowKeyValues bool `yaml:"show_key_values"`
}

// Enabled reports whether the admin endpoints have their own listener.
func (a Admin) Enabled() bool { return a.Addr != "" && a.Addr != "off" }

func (a Admin) validate(at func(string) string) error {
	if a.Enabled() {
		if err := checkAddr(a.Addr); err != nil {
			return fmt.Errorf("%s: admin.addr: %v", at("admin.addr"), err)
		}
	}
	if err := a.TLS.validate(); err != nil {
		return fmt.Errorf("%s: admin.tls: %v", at("admin.tls"), err)
	}
	if a.TokenFile != "" && a.TokenEnv != "" {
		return fmt.Errorf("%s: admin: give token_file or token_env, not both", at("admin"))
	}
	return nil
}

// loadToken reads the admin bearer token, "" when none is configured.
func (a Admin) loadToken() (string, error) {
	var tok, from string
	switch {
	case a.TokenFile != "":
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("admin.token_file: %w", err)
		}
		tok, from = strings.TrimSpace(string(b)), "file "+a.TokenFile
	case a.TokenEnv != "":
		tok, from = strings.TrimSpace(os.Getenv(a.TokenEnv)), "environment variable "+a.TokenEnv
	default:
		return "", nil
	}
	if len(tok) < 16 {
		return "", fmt.Errorf("admin token from %s is %d characters; use at least 16 (e.g. openssl rand -hex 32)", from, len(tok))
	}
	return tok, nil
}

// access decides who sees what on the admin endpoints.
type access struct {
	tokenSum [32]byte // SHA-256 of the token, compared in constant time
	hasToken bool
	show     bool // admin.show_key_values
}

func newAccess(a Admin) (*access, error) {
	tok, err := a.loadToken()
	if err != nil {
		return nil, err
	}
	ac := &access{hasToken: tok != "", show: a.ShowKeyValues}
	if ac.hasToken {
		ac.tokenSum = sha256.Sum256([]byte(tok))
	}
	return ac, nil
}

// authenticated reports whether r carries the configured bearer token.
func (ac *access) authenticated(r *http.Request) bool {
	if !ac.hasToken {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], ac.tokenSum[:]) == 1
}

// require answers 401 unless r carries the token (when one is configured).
func (ac *access) require(h http.Handler) http.Handler {
	if !ac.hasToken {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ac.authenticated(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
			writeText(w, http.StatusUnauthorized, "unauthorized: send the admin token as \"Authorization: Bearer <token>\"\n")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// details reports whether r may see details (store errors, rule file
// paths, rule values): it carries the token, or no token is configured and
// it came in on the separate admin listener (onAdmin).
func (ac *access) details(r *http.Request, onAdmin bool) bool {
	return ac.authenticated(r) || (onAdmin && !ac.hasToken)
}

// buildMuxes returns the handlers of the http listener and, when it is
// enabled, of the admin listener.
func (s *Server) buildMuxes(api http.Handler, ac *access) (public, admin http.Handler) {
	pub := http.NewServeMux()
	pub.Handle("/v1/", api)
	if s.guber != nil {
		gh := s.guber.Handler(s.cfg.MaxBodyBytes)
		for _, p := range []string{gubernator.PathGetRateLimits, gubernator.PathHealthCheck, gubernator.PathLiveCheck} {
			pub.Handle(p, gh)
		}
	}
	if s.envoyJSON != nil {
		pub.Handle("/json", s.envoyJSON)
	}
	healthRoutes(pub, s, false)
	if !s.cfg.Admin.Enabled() {
		s.adminRoutes(pub, ac, false)
		return pub, nil
	}
	elsewhere := func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusNotFound, "not found: the admin endpoints are served on the admin listener\n")
	}
	for _, p := range []string{"/v1/rules", "/metrics", "/debug/pprof/", "/status.json", "/{$}"} {
		pub.HandleFunc(p, elsewhere)
	}
	adm := http.NewServeMux()
	healthRoutes(adm, s, true)
	s.adminRoutes(adm, ac, true)
	return pub, adm
}

// healthRoutes registers /healthz and /readyz on mux.
func healthRoutes(mux *http.ServeMux, s *Server, onAdmin bool) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		s.readyz(w, r, s.access.details(r, onAdmin))
	})
}

// adminRoutes registers the admin endpoints on mux, behind the token.
func (s *Server) adminRoutes(mux *http.ServeMux, ac *access, onAdmin bool) {
	mux.Handle("/v1/rules", ac.require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.rulesListing(w, r, ac.details(r, onAdmin))
	})))
	mux.Handle("GET /metrics", ac.require(s.rec.Handler()))
	mux.Handle("/", ac.require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		statuspage.Handler(statusSource{s: s, details: ac.details(r, onAdmin)}).ServeHTTP(w, r)
	})))
	if s.cfg.Pprof {
		pp := http.NewServeMux()
		pp.HandleFunc("/debug/pprof/", pprof.Index)
		pp.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		pp.HandleFunc("/debug/pprof/profile", pprof.Profile)
		pp.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		pp.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.Handle("/debug/pprof/", ac.require(pp))
	}
}

// rulesListing is GET /v1/rules. Callers without details (see
// access.details) see the rule file's base name instead of its path, and
// masked values in every rule's match and overrides (an unlimited key's
// value is a credential) unless admin.show_key_values is set.
func (s *Server) rulesListing(w http.ResponseWriter, r *http.Request, details bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		httpapi.Error(w, http.StatusMethodNotAllowed, "use GET for /v1/rules")
		return
	}
	out := httpapi.NewRulesResponse(s.engine.Set())
	if s.cfg.Shadow {
		out.Shadow = true
		for i := range out.Rules {
			out.Rules[i].Shadow = true
		}
	}
	if !details {
		if out.File != "" {
			out.File = filepath.Base(out.File)
		}
		if !s.access.show {
			for i := range out.Rules {
				out.Rules[i].Match = maskMatch(out.Rules[i].Match)
				for j, o := range out.Rules[i].Overrides {
					out.Rules[i].Overrides[j] = maskMatch(o)
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}

// maskMatch masks the exact values in a rule's match description
// ("header:x-api-key = sk_live_1, path prefix /loan/" becomes
// "header:x-api-key = (masked:…), path prefix /loan/"). Patterns (prefix,
// like, in) are shown. A value runs to the next ", ", ")" or ": ".
func maskMatch(m string) string {
	var b strings.Builder
	for {
		i := strings.Index(m, "= ")
		if i < 0 {
			b.WriteString(m)
			return b.String()
		}
		b.WriteString(m[:i+2])
		m = m[i+2:]
		end := len(m)
		for _, sep := range []string{", ", ")", ": "} {
			if j := strings.Index(m, sep); j >= 0 && j < end {
				end = j
			}
		}
		b.WriteString(maskValue(m[:end]))
		m = m[end:]
	}
}

// statusSource feeds the status page. Viewers without details get the
// store's last error with its addresses left out, and sensitive key values
// are masked unless admin.show_key_values is set.
type statusSource struct {
	s       *Server
	details bool
}

// Rules lists the rules in force, all marked shadow under the global switch.
func (src statusSource) Rules() []rules.RuleInfo {
	rs := src.s.engine.Set().Rules()
	for i := range rs {
		if src.s.cfg.Shadow {
			rs[i].Shadow = true
		}
		if !src.details && !src.s.access.show {
			rs[i].Match = maskMatch(rs[i].Match)
			for j, o := range rs[i].Overrides {
				rs[i].Overrides[j] = maskMatch(o)
			}
		}
	}
	return rs
}

// Snapshot returns the recorder's current figures, masked for the viewer.
func (src statusSource) Snapshot() metrics.Snapshot {
	snap := src.s.rec.Snapshot()
	if !src.s.access.show {
		for i := range snap.TopRejected {
			snap.TopRejected[i].Key = maskKey(snap.TopRejected[i].Key)
		}
	}
	if !src.details {
		snap.Store.Detail = scrubAddrs(snap.Store.Detail)
	}
	return snap
}

// History is the recorder's last hour of decisions, for the page's chart.
func (src statusSource) History() []metrics.Point { return src.s.rec.History() }

// readyz answers 200 when the server can decide with its store. Only
// callers with details see why it cannot (the error names the store's
// address); others get the kind of failure.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, details bool) {
	ok, why := s.Ready(r.Context())
	if ok {
		writeText(w, http.StatusOK, "ready\n")
		return
	}
	if !details {
		why = scrubAddrs(why)
	}
	writeText(w, http.StatusServiceUnavailable, "not ready: "+why+"\n")
}

var (
	urlRE      = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s,;()"]*[^\s,;()":]`)
	hostPortRE = regexp.MustCompile(`(\[[0-9a-fA-F:.%]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}\b`)
	ipRE       = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}\b`)
	lookupRE   = regexp.MustCompile(`lookup [^\s:]+`)
)

// scrubAddrs removes what names the store's network from an error message
// (URLs, host:port, IP addresses, looked-up host names) and keeps the kind
// of failure: "dial tcp 10.0.0.5:6379: connect: connection refused" becomes
// "dial tcp [address]: connect: connection refused".
func scrubAddrs(msg string) string {
	msg = urlRE.ReplaceAllString(msg, "[store]")
	msg = hostPortRE.ReplaceAllString(msg, "[address]")
	msg = ipRE.ReplaceAllString(msg, "[address]")
	return lookupRE.ReplaceAllString(msg, "lookup [host]")
}
