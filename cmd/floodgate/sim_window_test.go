package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimWindowBaselineTable runs the command with its defaults and holds the
// fixed-window, sliding-window and token-bucket rows to the baseline's table.
func TestSimWindowBaselineTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := dispatch([]string{"sim", "window", "--json"}, &out, &errOut); err != nil {
		t.Fatalf("sim window --json: %v (%s)", err, errOut.String())
	}
	var doc windowJSONDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if doc.Limit != 600 || doc.WindowMS != 60000 || len(doc.Patterns) != 3 {
		t.Fatalf("limit %d, window %dms, %d patterns; want 600, 60000, 3", doc.Limit, doc.WindowMS, len(doc.Patterns))
	}
	type row struct {
		acc, rej int
		busiest  int64
	}
	want := map[string]map[string]row{
		"uniform 2x":          {"fixed-window": {1800, 1800, 600}, "sliding-window": {1800, 1800, 600}, "token-bucket": {1859, 1741, 659}},
		"piled at boundary":   {"fixed-window": {1800, 600, 1200}, "sliding-window": {1200, 1200, 600}, "token-bucket": {318, 2082, 159}},
		"spaced at the limit": {"fixed-window": {1800, 0, 600}, "sliding-window": {1800, 0, 600}, "token-bucket": {327, 1473, 109}},
	}
	requests := map[string]int{"uniform 2x": 3600, "piled at boundary": 2400, "spaced at the limit": 1800}
	for _, p := range doc.Patterns {
		if p.Requests != requests[p.Name] {
			t.Errorf("%s: %d requests, want %d", p.Name, p.Requests, requests[p.Name])
		}
		if len(p.Results) != 9 {
			t.Errorf("%s: %d results, want one per algorithm (9)", p.Name, len(p.Results))
		}
		found := 0
		for _, r := range p.Results {
			w, ok := want[p.Name][r.Algorithm]
			if !ok {
				continue
			}
			found++
			if got := (row{r.Accepted, r.Rejected, r.Busiest}); got != w {
				t.Errorf("%s/%s: accepted/rejected/busiest = %v, the baseline says %v", p.Name, r.Algorithm, got, w)
			}
			if r.Overshoot != r.Busiest-600 || r.Ratio != float64(int(float64(r.Busiest)/600*1000+0.5))/1000 {
				t.Errorf("%s/%s: overshoot %d, ratio %v for busiest %d", p.Name, r.Algorithm, r.Overshoot, r.Ratio, r.Busiest)
			}
		}
		if found != 3 {
			t.Errorf("%s: found %d of the baseline's three algorithms", p.Name, found)
		}
	}
}

func TestSimWindowTextAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "w.svg")
	var out, errOut bytes.Buffer
	args := []string{"sim", "window", "--limit", "30", "--window", "3s", "--slices", "3", "--bucket", "3", "--duration", "9s", "--svg", svg}
	if err := dispatch(args, &out, &errOut); err != nil {
		t.Fatalf("%v: %v (%s)", args, err, errOut.String())
	}
	text := out.String()
	for _, s := range []string{`pattern "uniform 2x": 180 requests`, `pattern "piled at boundary": 120 requests`, "bounded-log", "leaky-bucket", "concurrency", "chart written to"} {
		if !strings.Contains(text, s) {
			t.Errorf("output lacks %q:\n%s", s, text)
		}
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("<svg")) || !bytes.Contains(b, []byte("limit L = 30")) {
		t.Errorf("SVG file does not look like the chart: %.200s", b)
	}
}

func TestSimWindowBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--limit", "0"},
		{"--window", "-1s"},
		{"--slices", "0"},
		{"--bucket", "0"},
		{"--duration", "1s"},
		{"--limit", "600", "--window", "1s"},
		{"--window", "1500us"},
		{"extra"},
		{"--nope"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := runSimWindow(args, &out, &errOut); err == nil {
				t.Errorf("sim window %v succeeded, want an error", args)
			}
		})
	}
}
