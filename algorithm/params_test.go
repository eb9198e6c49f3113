package algorithm

import (
	"testing"
	"time"
)

// TestParams checks the parameter form against what the algorithms do: a
// bucket's Interval is what a cost-1 request on a fresh state reports as
// ResetAfter, and bounded-log's EntryUnits and Entries are boundedLogSize's.
func TestParams(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: TokenBucket, Limit: 3000, Window: time.Second, Capacity: 1, Rate: 3000},
		{Algorithm: GCRA, Limit: 10, Window: time.Second, Burst: 3},
		{Algorithm: LeakyBucket, Limit: 5, Window: time.Second, MaxDelay: 600 * time.Millisecond},
	} {
		a := mustNew(t, c)
		p, ok := paramsOf(a)
		if !ok || p.Name != c.Algorithm || p.Words != a.Words() || p.IdleAfter != a.IdleAfter() {
			t.Fatalf("%+v: params %+v", c, p)
		}
		if got := a.Peek(make([]int64, a.Words()), 1<<40, 1).ResetAfter; got != p.Interval {
			t.Errorf("%s: Interval %v, a fresh request resets after %v", c.Algorithm, p.Interval, got)
		}
	}
	a := mustNew(t, Config{Limit: 600, Window: time.Minute})
	p, _ := paramsOf(a)
	m, size := boundedLogSize(600, 0.05)
	if p.EntryUnits != m || p.Entries != size || p.Words != 2+3*int(size) {
		t.Fatalf("bounded-log params %+v, want m %d, %d entries", p, m, size)
	}
	if !p.TimeWord(1) || p.TimeWord(0) || !p.TimeWord(2) || p.TimeWord(2+int(size)) || !p.TimeWord(2+2*int(size)) {
		t.Fatalf("bounded-log time words wrong")
	}
	if _, ok := paramsOf(nil); ok {
		t.Fatalf("paramsOf(nil) ok")
	}
}

// paramsOf returns a's Params, found as a store finds them.
func paramsOf(a Algorithm) (Params, bool) {
	x, ok := a.(interface{ Params() Params })
	if !ok {
		return Params{}, false
	}
	return x.Params(), true
}
