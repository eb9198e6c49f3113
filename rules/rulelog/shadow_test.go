package rulelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
)

func TestShadowSamplesPerRule(t *testing.T) {
	var buf bytes.Buffer
	sl := NewShadow(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	now := time.Unix(1000, 0)
	sl.now = func() time.Time { return now }
	res := rules.Result{Allowed: true, Statuses: []rules.Status{
		{Rule: "a", Shadow: true, Decision: algorithm.Decision{Allowed: false}},
		{Rule: "b", Shadow: true, Decision: algorithm.Decision{Allowed: false}},
		{Rule: "c", Shadow: false, Decision: algorithm.Decision{Allowed: false}},
		{Rule: "d", Shadow: true, Decision: algorithm.Decision{Allowed: true}},
	}}
	for i := 0; i < 100; i++ {
		sl.Record(res)
	}
	if n := strings.Count(buf.String(), "shadow rule would reject"); n != 2 {
		t.Fatalf("%d records for 100 rejections by two rules within a second, want 2:\n%s", n, buf.String())
	}
	now = now.Add(1100 * time.Millisecond)
	buf.Reset()
	sl.Record(res)
	out := buf.String()
	if strings.Count(out, "shadow rule would reject") != 2 || !strings.Contains(out, "rule=a") || !strings.Contains(out, "rejections=100") {
		t.Fatalf("record after the interval should carry the 99 suppressed plus this one:\n%s", out)
	}
	if strings.Contains(out, "rule=c") || strings.Contains(out, "rule=d") {
		t.Fatalf("logged an enforcing or an allowing rule:\n%s", out)
	}
}
