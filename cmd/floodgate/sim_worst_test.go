package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type worstDoc struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Runs      int    `json:"runs"`
	Overshoot struct {
		Busiest  int64   `json:"busiest"`
		Ratio    float64 `json:"ratio"`
		Requests int     `json:"requests"`
	} `json:"overshoot"`
	Compliant struct {
		Requests     int   `json:"requests"`
		Rejected     int   `json:"rejected"`
		FalseRejects int   `json:"false_rejects"`
		MaxSent      int64 `json:"max_sent_in_window"`
	} `json:"compliant"`
}

func simWorst(t *testing.T, args ...string) worstDoc {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"sim", "worst", "--limit", "60", "--window", "6s", "--slices", "6", "--bucket", "6", "--budget", "60", "--json"}, args...)
	if err := dispatch(args, &out, &errOut); err != nil {
		t.Fatalf("%v: %v (%s)", args, err, errOut.String())
	}
	var doc worstDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if doc.Compliant.MaxSent > doc.Limit {
		t.Errorf("%v: compliant pattern sends %d in a window, over %d", args, doc.Compliant.MaxSent, doc.Limit)
	}
	return doc
}

func TestSimWorstExpectedFindings(t *testing.T) {
	if d := simWorst(t, "--algorithm", "fixed-window"); d.Overshoot.Busiest != 120 || d.Overshoot.Ratio != 2 {
		t.Errorf("fixed-window: busiest %d (x%v), want 120 (x2)", d.Overshoot.Busiest, d.Overshoot.Ratio)
	}
	if d := simWorst(t, "--algorithm", "sliding-window"); d.Overshoot.Busiest < 90 {
		t.Errorf("sliding-window: busiest %d, want far above the limit of 60", d.Overshoot.Busiest)
	}
	if d := simWorst(t, "--algorithm", "token-bucket"); d.Compliant.Rejected == 0 || d.Compliant.FalseRejects != d.Compliant.Rejected {
		t.Errorf("token-bucket: %d compliant requests rejected (%d false rejects), want some", d.Compliant.Rejected, d.Compliant.FalseRejects)
	}
	if d := simWorst(t, "--algorithm", "bounded-log", "--tolerance", "0.1"); d.Overshoot.Busiest > 66 || d.Compliant.Rejected != 0 {
		t.Errorf("bounded-log: busiest %d, false rejects %d; want <= 66 and 0", d.Overshoot.Busiest, d.Compliant.Rejected)
	}
	if d := simWorst(t, "--algorithm", "sliding-log"); d.Overshoot.Busiest != 60 || d.Compliant.Rejected != 0 {
		t.Errorf("sliding-log: busiest %d, false rejects %d; want exactly 60 and 0", d.Overshoot.Busiest, d.Compliant.Rejected)
	}
}

// TestSimWorstTraceReplays writes the findings as a trace and replays it
// with verify: the verifier must see what the search saw.
func TestSimWorstTraceReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worst.csv")
	d := simWorst(t, "--algorithm", "token-bucket", "--trace-out", path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# floodgate sim worst: token-bucket") {
		t.Errorf("trace does not start with its comment: %.100s", b)
	}
	var out, errOut bytes.Buffer
	args := []string{"verify", "--algorithm", "token-bucket", "--limit", "60", "--window", "6s", "--bucket", "6", "--trace", path, "--json"}
	if err := dispatch(args, &out, &errOut); err != nil {
		t.Fatalf("%v: %v (%s)", args, err, errOut.String())
	}
	var v verifyDoc
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	keys := map[string]keyReport{}
	for _, k := range v.Keys {
		keys[k.Key] = k
	}
	if w := keys["worst"]; w.Busiest != d.Overshoot.Busiest || w.Requests != d.Overshoot.Requests {
		t.Errorf("replayed worst: busiest %d of %d requests, search found %d of %d", w.Busiest, w.Requests, d.Overshoot.Busiest, d.Overshoot.Requests)
	}
	if c := keys["compliant"]; c.Rejected != d.Compliant.Rejected || c.FalseRejects != d.Compliant.Rejected || c.Requests != d.Compliant.Requests {
		t.Errorf("replayed compliant: %+v, search found %d rejected of %d", c, d.Compliant.Rejected, d.Compliant.Requests)
	}
}

func TestSimWorstBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--algorithm", "nope"},
		{"--algorithm", "gcra", "--limit", "-1"},
		{"--algorithm", "gcra", "--budget", "0"},
		{"--algorithm", "gcra", "--horizon", "1s"},
		{"--algorithm", "gcra", "--tolerance", "-1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := runSimWorst(args, &out, &errOut); err == nil {
				t.Errorf("sim worst %v succeeded, want an error", args)
			}
		})
	}
}
