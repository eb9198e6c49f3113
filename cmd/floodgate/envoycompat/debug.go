package envoycompat

import (
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
)

// debugEndpoints are the debug listener's endpoints and the help the
// reference's index gives for each.
var debugEndpoints = []struct {
	path, help string
	handler    func(*Server) http.HandlerFunc
}{
	{"/debug/pprof/", "root of various pprof endpoints. hit for help.", func(*Server) http.HandlerFunc { return pprof.Index }},
	{"/debug/pprof/profile", "CPU profiling endpoint", func(*Server) http.HandlerFunc { return pprof.Profile }},
	{"/debug/pprof/trace", "trace endpoint", func(*Server) http.HandlerFunc { return pprof.Trace }},
	{"/rlconfig", "print out the currently loaded configuration for debugging", func(s *Server) http.HandlerFunc { return s.serveConfig }},
	{"/stats", "print out stats", func(*Server) http.HandlerFunc { return serveExpvar }},
}

// debugMux serves DEBUG_PORT as the reference does: pprof, the loaded
// rules (/rlconfig), the process's expvar variables (/stats) and, at /,
// the index of these endpoints. Any other path is 404 (the reference
// answers the index there too).
func (s *Server) debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, e := range debugEndpoints {
		mux.HandleFunc(e.path, e.handler(s))
	}
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		for _, e := range debugEndpoints { // sorted by path, as there
			fmt.Fprintf(w, "%s: %s\n", e.path, e.help)
		}
	})
	return mux
}

// serveConfig writes the rules in force as the reference's /rlconfig
// does, one line per limit; nothing before the first rules load (xDS).
func (s *Server) serveConfig(w http.ResponseWriter, _ *http.Request) {
	if cfg := s.svc.config.Load(); cfg != nil {
		io.WriteString(w, cfg.Dump())
	}
}

// serveExpvar writes every expvar variable as name: value, as the
// reference's /stats does.
func serveExpvar(w http.ResponseWriter, _ *http.Request) {
	expvar.Do(func(kv expvar.KeyValue) {
		fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value)
	})
}

// Dump is the loaded configuration as envoyproxy/ratelimit prints it at
// /rlconfig: for each limit, its path in the rule files (domain.key_value
// .key...), unit, requests per unit, shadow_mode and quota_mode. The
// reference prints them in map order; here they are sorted.
func (c *Config) Dump() string {
	var lines []string
	var walk func(n *node)
	walk = func(n *node) {
		if l := n.limit; l != nil {
			lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
				l.fullKey, l.unit, l.perUnit, l.shadow, l.quota))
		}
		for _, ch := range n.children {
			walk(ch)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	sort.Strings(lines)
	return strings.Join(lines, "")
}
