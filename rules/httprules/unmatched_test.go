package httprules

import (
	"bytes"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/rules/rulelog"
)

// A middleware with a mistyped domain, or with rules on an entry its
// sources never produce, lets requests through but counts and logs them.
func TestMiddlewareCountsUnmatched(t *testing.T) {
	engine := newEngine(t, `
domain: shop
rules:
  - name: per-key
    match: {header:x-api-key: {any: true}}
    count_by: [header:x-api-key]
    limit: 1
    window: 1h
`)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	for _, c := range []struct {
		domain string
		want   map[string]uint64
		reason string
	}{
		{"shpo", map[string]uint64{"other": 3}, "no rule set has this domain"},
		{"shop", map[string]uint64{"shop": 3}, "no rule of the domain matches"},
	} {
		t.Run(c.domain, func(t *testing.T) {
			buf.Reset()
			um := rulelog.NewUnmatched(log, 0)
			// The default source describes requests by IP only: the rule on
			// the API key header never applies.
			srv := newServer(t, Options{Checker: engine, Domain: c.domain, Logger: log, Unmatched: um}, ok)
			for range 3 {
				if resp := get(t, srv.URL+"/a", "X-Api-Key", "k1"); resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
			}
			if got := um.Counts(); !maps.Equal(got, c.want) {
				t.Errorf("domain %q: counts %v, want %v", c.domain, got, c.want)
			}
			if !strings.Contains(buf.String(), c.reason) || !strings.Contains(buf.String(), "path=/a") || !strings.Contains(buf.String(), `example="ip=127.0.0.1"`) {
				t.Errorf("domain %q: log:\n%s", c.domain, buf.String())
			}
		})
	}
	// By default the middleware logs at most once a minute.
	buf.Reset()
	srv := newServer(t, Options{Checker: engine, Domain: "nope", Logger: log}, ok)
	for range 5 {
		get(t, srv.URL+"/b")
	}
	if n := strings.Count(buf.String(), "matched no rule"); n != 1 {
		t.Errorf("%d records, want 1:\n%s", n, buf.String())
	}
}
