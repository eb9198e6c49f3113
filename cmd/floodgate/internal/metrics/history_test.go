package metrics

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestHistory records two hours of points under a virtual clock: the
// history keeps the last hour, oldest first, each point counting the
// requests of its second; a call within half a step of the last adds
// nothing; counts saturate; and the points take HistoryBytes.
func TestHistory(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := New(WithClock(func() time.Time { return now }))
	if h := r.History(); len(h) != 0 {
		t.Fatalf("a new recorder has %d points", len(h))
	}
	for i := range 2 * HistoryPoints {
		r.totals.allowed.Add(uint64(i % 7))
		r.totals.rejected.Add(uint64(i % 3))
		r.totals.unmatched.Add(1)
		now = now.Add(HistoryStep)
		r.RecordHistory()
		if i == 10 {
			now = now.Add(HistoryStep / 4)
			r.RecordHistory() // too soon: no point
		}
	}
	h := r.History()
	if len(h) != HistoryPoints {
		t.Fatalf("%d points after two hours, want %d", len(h), HistoryPoints)
	}
	for j, p := range h {
		i := HistoryPoints + j // the step this point records
		want := Point{Decided: uint32(i%7 + i%3 + 1), Rejected: uint32(i % 3)}
		if p.Decided != want.Decided || p.Rejected != want.Rejected {
			t.Fatalf("point %d: %+v, want %+v", j, p, want)
		}
		if j > 0 && p.Time <= h[j-1].Time {
			t.Fatalf("point %d at %d, not after point %d at %d", j, p.Time, j-1, h[j-1].Time)
		}
	}
	if last := h[len(h)-1].Time; last != now.UnixMilli() {
		t.Errorf("the newest point ends at %d, want %d", last, now.UnixMilli())
	}
	r.totals.rejected.Add(math.MaxUint32 + 5)
	now = now.Add(HistoryStep)
	r.RecordHistory()
	if p := r.History()[HistoryPoints-1]; p.Rejected != math.MaxUint32 || p.Decided != math.MaxUint32 {
		t.Errorf("a step over 2^32 requests: %+v, want both saturated", p)
	}
	if size := unsafe.Sizeof(Point{}) * HistoryPoints; size != HistoryBytes || unsafe.Sizeof(r.history.points) != HistoryBytes {
		t.Errorf("the points take %d bytes, want HistoryBytes %d", size, HistoryBytes)
	}
}
