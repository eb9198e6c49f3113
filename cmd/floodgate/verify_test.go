package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTrace(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.csv")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func verify(t *testing.T, args ...string) (verifyDoc, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := dispatch(append([]string{"verify"}, args...), &out, &errOut); err != nil {
		t.Fatalf("verify %v: %v (%s)", args, err, errOut.String())
	}
	var doc verifyDoc
	if strings.HasPrefix(out.String(), "{") {
		if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
	}
	return doc, out.String()
}

func TestVerifyCounts(t *testing.T) {
	// Limit 3 per second, fixed window. alice sends 3 at 900ms and 3 at
	// 1000ms: all accepted (new window), 6 in one second. bob sends 4 at
	// once: the 4th is rejected, rightly. carol sends 2 of cost 2, the
	// second rejected while she had sent 4 > 3: rightly. dave sends at
	// 0 and, out of order in the file, at 500ms: both fine.
	path := writeTrace(t, `# time_ms,key[,cost]
900,alice
900,alice
900,alice
1000,alice
1000,alice
1000,alice
0,bob
0,bob
0,bob
0,bob

10,carol,2
20,carol,2
500,dave
0,dave
`)
	doc, _ := verify(t, "--algorithm", "fixed-window", "--limit", "3", "--window", "1s", "--trace", path, "--json")
	want := map[string]keyReport{
		"alice": {"alice", 6, 6, 0, 6, 0},
		"bob":   {"bob", 4, 3, 1, 3, 0},
		"carol": {"carol", 2, 1, 1, 2, 0},
		"dave":  {"dave", 2, 2, 0, 2, 0},
	}
	if len(doc.Keys) != len(want) {
		t.Fatalf("keys %+v", doc.Keys)
	}
	for _, k := range doc.Keys {
		if k != want[k.Key] {
			t.Errorf("key %s: %+v, want %+v", k.Key, k, want[k.Key])
		}
	}
	if tot := doc.Total; tot != (keyReport{"total", 14, 12, 2, 6, 0}) {
		t.Errorf("total %+v", tot)
	}
	if doc.Algorithm != "fixed-window" || doc.Limit != 3 || doc.WindowMS != 1000 {
		t.Errorf("header %+v", doc)
	}
}

func TestVerifyFalseRejects(t *testing.T) {
	// A compliant client: 4 at 0ms and 4 at 1000ms, limit 4 per second.
	// A 2-token bucket refilled at 4/s rejects 2 of each pile, and every
	// one of those is a false reject. Sliding-log rejects none.
	var b strings.Builder
	for _, at := range []string{"0", "1000"} {
		for range 4 {
			b.WriteString(at + ",c\n")
		}
	}
	path := writeTrace(t, b.String())
	doc, _ := verify(t, "--algorithm", "token-bucket", "--bucket", "2", "--limit", "4", "--window", "1s", "--trace", path, "--json")
	if tot := doc.Total; tot.Rejected != 4 || tot.FalseRejects != 4 {
		t.Errorf("token-bucket: %+v, want 4 rejected, all false", tot)
	}
	doc, _ = verify(t, "--algorithm", "sliding-log", "--limit", "4", "--window", "1s", "--trace", path, "--json")
	if tot := doc.Total; tot.Rejected != 0 || tot.Busiest != 4 {
		t.Errorf("sliding-log: %+v, want none rejected, busiest 4", tot)
	}
	_, text := verify(t, "--algorithm", "token-bucket", "--bucket", "2", "--limit", "4", "--window", "1s", "--trace", path)
	if !strings.Contains(text, "false rejects") || !strings.Contains(text, "total") {
		t.Errorf("text report lacks its columns:\n%s", text)
	}
}

func TestVerifyMalformedTrace(t *testing.T) {
	path := writeTrace(t, "# ok\n0,a\n5,b,x\n")
	var out, errOut bytes.Buffer
	err := runVerify([]string{"--algorithm", "sliding-log", "--trace", path}, &out, &errOut)
	if err == nil || err.Error() != path+`:3: cost "x" is not a whole number` {
		t.Errorf("error %v, want %s:3: cost \"x\" is not a whole number", err, path)
	}
}

func TestVerifyBadFlags(t *testing.T) {
	path := writeTrace(t, "0,a\n")
	for _, args := range [][]string{
		{"--trace", path},
		{"--algorithm", "sliding-log"},
		{"--algorithm", "nope", "--trace", path},
		{"--algorithm", "sliding-log", "--trace", filepath.Join(t.TempDir(), "missing.csv")},
		{"--algorithm", "sliding-log", "--limit", "0", "--trace", path},
		{"--algorithm", "sliding-log", "--window", "1500us", "--trace", path},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := runVerify(args, &out, &errOut); err == nil {
				t.Errorf("verify %v succeeded, want an error", args)
			}
		})
	}
}

// --strict exits 1 when the replay broke the promise and only then.
func TestVerifyStrict(t *testing.T) {
	// alice: 3 at 900ms and 3 at 1000ms; a fixed window of 3 per second
	// accepts all 6 within 100ms, twice the limit.
	path := writeTrace(t, "900,alice\n900,alice\n900,alice\n1000,alice\n1000,alice\n1000,alice\n")
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := dispatch(append([]string{"verify", "--limit", "3", "--window", "1s", "--trace", path, "--strict"}, args...), &out, &errOut)
		return errOut.String(), err
	}
	msg, err := run("--algorithm", "fixed-window")
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 1 || !strings.Contains(msg, "busiest window 6 > 3") {
		t.Fatalf("fixed-window: err %v, stderr %q; want exit 1 naming the busiest window", err, msg)
	}
	if msg, err := run("--algorithm", "fixed-window", "--json"); !errors.As(err, &exit) || exit.code != 1 {
		t.Fatalf("fixed-window --json: err %v, stderr %q; want exit 1", err, msg)
	}
	// bounded-log keeps both halves of the promise on the same trace.
	if msg, err := run("--algorithm", "bounded-log"); err != nil {
		t.Fatalf("bounded-log: %v (%s)", err, msg)
	}
	// A token bucket of 1 rejects compliant requests.
	msg, err = run("--algorithm", "token-bucket", "--bucket", "1")
	if !errors.As(err, &exit) || !strings.Contains(msg, "false rejects") {
		t.Fatalf("token-bucket: err %v, stderr %q; want exit 1 naming false rejects", err, msg)
	}
}
