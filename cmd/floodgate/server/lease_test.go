package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// Over Redis in the delayed arrangement (the server's default with Redis)
// and the split one, /v1/check of a concurrency rule returns a lease, and
// /v1/release frees exactly one slot with it, once; a made-up lease frees
// nothing.
func TestReleaseByLeaseOverRedis(t *testing.T) {
	rs := redistest.Start(t)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(`domain: leases
rules:
  - name: jobs
    match: {job: "*"}
    count_by: [job]
    limit: 1
    window: 1m
    algorithm: concurrency
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []distributed.Arrangement{distributed.Delayed, distributed.Split} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := testConfig()
			cfg.Rules = rulesFile
			if err := cfg.Store.SetURL("redis://" + rs.Addr()); err != nil {
				t.Fatal(err)
			}
			cfg.Arrangement.Mode = mode
			cfg.Arrangement.SyncDeadline = time.Second
			cfg.Arrangement.Deadline = testDeadline() // the lease calls go to Redis: a stalled machine must not turn them into 503s
			r := start(t, cfg)
			body := func(lease string) string {
				b := `{"domain":"leases","descriptors":[{"entries":[{"key":"job","value":"` + string(mode) + `"}]}]`
				if lease != "" {
					b += `,"lease":"` + lease + `"`
				}
				return b + "}"
			}
			check := func() (bool, string) {
				t.Helper()
				code, out := post(t, r.url("/v1/check"), body(""))
				var m struct {
					Allowed bool   `json:"allowed"`
					Lease   string `json:"lease"`
				}
				if code != 200 || json.Unmarshal([]byte(out), &m) != nil {
					t.Fatalf("/v1/check: %d %s", code, out)
				}
				return m.Allowed, m.Lease
			}
			release := func(lease string) string {
				t.Helper()
				code, out := post(t, r.url("/v1/release"), body(lease))
				if code != 200 {
					t.Fatalf("/v1/release: %d %s", code, out)
				}
				var m struct {
					Released bool `json:"released"`
				}
				json.Unmarshal([]byte(out), &m)
				if m.Released {
					return "released"
				}
				return "not released"
			}
			allowed, lease := check()
			if !allowed || lease == "" {
				t.Fatalf("holder: allowed %v, lease %q; want allowed with a lease", allowed, lease)
			}
			if allowed, _ := check(); allowed {
				t.Fatal("second holder allowed over a limit of 1")
			}
			if got := release("0123456789abcdef01234567"); got != "not released" {
				t.Fatalf("made-up lease: %s", got)
			}
			if allowed, _ := check(); allowed {
				t.Fatal("a made-up lease freed the slot")
			}
			if got := release(lease); got != "released" {
				t.Fatalf("holder's lease: %s", got)
			}
			if got := release(lease); got != "not released" {
				t.Fatalf("holder's lease again: %s", got)
			}
			if allowed, _ := check(); !allowed {
				t.Fatal("after the release, the slot is still held")
			}
			if allowed, _ := check(); allowed {
				t.Fatal("one release freed more than one slot")
			}
		})
	}
}
