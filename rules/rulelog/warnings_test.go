package rulelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
)

func crossing(rule, key string, alg algorithm.Name, window time.Duration, end time.Time) rules.Result {
	return rules.Result{Allowed: true, Statuses: []rules.Status{{Rule: rule, Key: key, Algorithm: alg, Window: window,
		PeriodEnd: end, Warning: true, CrossedWarning: true, Used: 80, WarnAt: 0.8,
		Decision: algorithm.Decision{Allowed: true, Limit: 100, Remaining: 20, ResetAfter: time.Until(end)}}}}
}

// TestWarningsOncePerKeyAndPeriod: a key is logged at its first crossing
// in a period and not again until the period ends; a rolling window's
// period is its length from the record; other keys are logged on their own.
func TestWarningsOncePerKeyAndPeriod(t *testing.T) {
	var buf bytes.Buffer
	w := NewWarnings(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2025, 1, 31, 23, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	month := time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)
	lines := func() int { n := strings.Count(buf.String(), "rule warning level reached"); buf.Reset(); return n }

	cal := crossing("monthly", "acme", algorithm.FixedWindow, 31*24*time.Hour, month)
	if n := w.Record(cal, "domain", "llm"); n != 1 || lines() != 1 {
		t.Fatalf("first crossing: %d crossed, want 1 logged", n)
	}
	now = month.Add(-time.Nanosecond)
	if n := w.Record(cal); n != 1 || lines() != 0 {
		t.Fatalf("a second crossing in the same period was logged (crossed %d)", n)
	}
	if w.Record(crossing("monthly", "beta", algorithm.FixedWindow, 31*24*time.Hour, month)); lines() != 1 {
		t.Fatal("another key's crossing was not logged")
	}
	now = month
	if w.Record(crossing("monthly", "acme", algorithm.FixedWindow, 28*24*time.Hour, month.AddDate(0, 1, 0))); lines() != 1 {
		t.Fatal("the next period's crossing was not logged")
	}
	roll := crossing("per-minute", "acme", algorithm.BoundedLog, time.Minute, time.Time{})
	w.Record(roll)
	now = now.Add(59 * time.Second)
	w.Record(roll)
	if n := lines(); n != 1 {
		t.Fatalf("%d records for two crossings of a rolling window within a minute, want 1", n)
	}
	now = now.Add(time.Second)
	if w.Record(roll); lines() != 1 {
		t.Fatal("a crossing a window after the record was not logged")
	}
	if w.Record(rules.Result{Allowed: true, Statuses: []rules.Status{{Rule: "x", Warning: true}}}); lines() != 0 {
		t.Fatal("a status in warning that did not cross was logged")
	}
	var nilW *Warnings
	if nilW.Record(cal) != 0 {
		t.Fatal("a nil Warnings counted")
	}
}

// TestWarningsBoundedMemory: with far more keys crossing in one period than
// slots, every key is logged at least once and the table does not grow.
func TestWarningsBoundedMemory(t *testing.T) {
	var buf bytes.Buffer
	w := NewWarnings(slog.New(slog.NewTextHandler(&buf, nil)))
	end := time.Now().Add(time.Hour)
	const keys = 4 * WarningSlots
	for i := range keys {
		w.Record(crossing("r", fmt.Sprint("k", i), algorithm.FixedWindow, time.Hour, end))
	}
	if n := strings.Count(buf.String(), "rule warning level reached"); n != keys {
		t.Fatalf("%d records for %d keys' first crossings, want every one", n, keys)
	}
	// Again: keys still in their slot are not logged twice; some were
	// pushed out and are, within the documented bound (at most once more).
	buf.Reset()
	for i := range keys {
		w.Record(crossing("r", fmt.Sprint("k", i), algorithm.FixedWindow, time.Hour, end))
	}
	if n := strings.Count(buf.String(), "rule warning level reached"); n >= keys || n < keys-WarningSlots {
		t.Fatalf("%d records on the second pass of %d keys over %d slots", n, keys, WarningSlots)
	}
}
