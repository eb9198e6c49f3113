package algorithm

import (
	"testing"
	"time"
)

// TestParams checks the parameter form against what the algorithms do: a
// bucket's Interval is what a cost-1 request on a fresh state reports as
// ResetAfter, bounded-log's EntryUnits and Entries are boundedLogSize's, and
// the script arguments come in the documented order, in the asked unit.
func TestParams(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: TokenBucket, Limit: 3000, Window: time.Second, Capacity: 1, Rate: 3000},
		{Algorithm: GCRA, Limit: 10, Window: time.Second, Burst: 3},
		{Algorithm: LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 600 * time.Millisecond},
	} {
		a := mustNew(t, c)
		p, ok := ParamsOf(a)
		if !ok || p.Name != c.Algorithm || p.Words != a.Words() || p.IdleAfter != a.IdleAfter() {
			t.Fatalf("%+v: params %+v", c, p)
		}
		if got := a.Peek(make([]int64, a.Words()), 1<<40, 1).ResetAfter; got != p.Interval {
			t.Errorf("%s: Interval %v, a fresh request resets after %v", c.Algorithm, p.Interval, got)
		}
	}
	a := mustNew(t, Config{Limit: 600, Window: time.Minute})
	p, _ := ParamsOf(a)
	m, size := boundedLogSize(600, 0.05)
	if p.EntryUnits != m || p.Entries != size || p.Words != 2+3*int(size) {
		t.Fatalf("bounded-log params %+v, want m %d, %d entries", p, m, size)
	}
	args, err := p.ScriptArgs(time.Microsecond)
	if err != nil || len(args) != 4 || args[0] != 600 || args[1] != 60_000_000 || args[2] != m || args[3] != size {
		t.Fatalf("bounded-log script args %v, %v", args, err)
	}
	if !p.TimeWord(1) || p.TimeWord(0) || !p.TimeWord(2) || p.TimeWord(2+int(size)) || !p.TimeWord(2+2*int(size)) {
		t.Fatalf("bounded-log time words wrong")
	}
	g, _ := ParamsOf(mustNew(t, Config{Algorithm: GCRA, Limit: 10, Window: time.Second, Burst: 3}))
	if args, _ := g.ScriptArgs(time.Microsecond); len(args) != 4 || args[0] != 10 || args[1] != 3 || args[2] != 100_000 || args[3] != 300_000 {
		t.Fatalf("gcra script args %v", args)
	}
	f, _ := ParamsOf(mustNew(t, Config{Algorithm: FixedWindow, Limit: 10, Window: time.Second + time.Nanosecond}))
	if _, err := f.ScriptArgs(time.Microsecond); err == nil {
		t.Fatalf("a window of %v is not whole µs, yet no error", time.Second+time.Nanosecond)
	}
	if _, ok := ParamsOf(nil); ok {
		t.Fatalf("ParamsOf(nil) ok")
	}
}
