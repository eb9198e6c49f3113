package server

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestMetricsDocumented holds the metrics table of docs/operations.md to
// what /metrics really exports: a memory server with gateway routes and a
// Redis server in each arrangement, between them, export every documented
// series with its documented type, and nothing undocumented. The table
// must be well formed (as many cells in every row as in its header).
func TestMetricsDocumented(t *testing.T) {
	documented := metricsTable(t, "../../../docs/operations.md")

	exported := map[string]string{} // name -> type, over every server below
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := testConfig()
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	scrapeFamilies(t, cfg, exported)

	rs := redistest.Start(t)
	for _, mode := range distributed.Arrangements() {
		cfg := testConfig()
		cfg.Store = Store{Type: StoreRedis, Addrs: []string{rs.Addr()}, Prefix: "fgmetrics"}
		cfg.Arrangement.Mode = mode
		scrapeFamilies(t, cfg, exported)
	}

	for name, typ := range exported {
		if !strings.HasPrefix(name, "floodgate_") {
			continue // the Go runtime's and the process's collectors
		}
		if d, ok := documented[name]; !ok {
			t.Errorf("%s (%s) is exported but not in the metrics table of docs/operations.md", name, typ)
		} else if d != typ {
			t.Errorf("%s is documented as a %s, exported as a %s", name, d, typ)
		}
	}
	for name := range documented {
		if _, ok := exported[name]; !ok {
			t.Errorf("%s is documented in docs/operations.md but no server exports it", name)
		}
	}
}

// scrapeFamilies runs a server for cfg and adds the metric families of its
// /metrics (from the # TYPE lines) to into.
func scrapeFamilies(t *testing.T, cfg Config, into map[string]string) {
	t.Helper()
	r := start(t, cfg)
	defer r.shutdown(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.url("/metrics"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			into[f[2]] = f[3]
		}
		// A fresh server has loaded its rules: an alert on the age of
		// the last load must not fire on it.
		if len(f) == 2 && f[0] == "floodgate_rule_reload_last_success_timestamp_seconds" && (f[1] == "0" || f[1] == "0e+00") {
			t.Errorf("%s is 0 on a fresh server", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// metricsTable reads the table under "## Metrics" in the file at path:
// metric name -> type. Every row must have as many cells as the header.
func metricsTable(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Metrics\n")
	if !ok {
		t.Fatalf("%s: no ## Metrics section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]string{}
	header := -1
	for i, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if header >= 0 && len(out) > 0 {
				break // the end of the table
			}
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if header < 0 {
			header = len(cells)
			if cells[0] != "metric" || cells[1] != "type" {
				t.Fatalf("%s: metrics table header %q: want metric | type | ...", path, line)
			}
			continue
		}
		if len(cells) != header {
			t.Errorf("%s: metrics table line %d has %d cells, the header %d: %s", path, i, len(cells), header, line)
			continue
		}
		if strings.HasPrefix(cells[0], "---") {
			continue
		}
		out[strings.Trim(cells[0], "`")] = cells[1]
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rows in the metrics table", path)
	}
	return out
}
