package algorithm

import (
	"math"
	"testing"
	"time"
)

// TestSlidingWindowPacking checks the state size for limits on either side
// of 2^16, and that every ring position holds its own count.
func TestSlidingWindowPacking(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		slices int
		words  int
	}{
		{600, 12, 4},   // four 16-bit counts to a word
		{65535, 12, 4}, // the largest 16-bit limit
		{65536, 12, 7}, // two 32-bit counts to a word
		{MaxLimit, 12, 7},
		{600, 1, 2},
		{600, 5, 3},
		{70000, 5, 4},
	} {
		a := mustNew(t, Config{Algorithm: SlidingWindow, Limit: tc.limit, Window: time.Minute, Slices: tc.slices}).(*slidingWindow)
		if a.Words() != tc.words {
			t.Errorf("limit %d, %d slices: %d words, want %d", tc.limit, tc.slices, a.Words(), tc.words)
		}
		// Give slice z the count z+1 (capped by the limit) and read all back.
		s := make([]int64, a.Words())
		base := int64(1000)
		var want int64
		for z := base; z < base+int64(tc.slices); z++ {
			v := min(z-base+1, tc.limit)
			a.Record(s, z*a.slice, v)
			want += v
		}
		for z := base; z < base+int64(tc.slices); z++ {
			if got, v := a.count(s, z), min(z-base+1, tc.limit); got != v {
				t.Errorf("limit %d: slice %d holds %d, want %d", tc.limit, z, got, v)
			}
		}
		now := (base+int64(tc.slices)-1)*a.slice + 1
		if d := a.Peek(s, now, 1); d.Remaining != max(0, tc.limit-want-1) && d.Remaining != max(0, tc.limit-want) {
			t.Errorf("limit %d: remaining %d with %d counted", tc.limit, d.Remaining, want)
		}
	}
}

// TestSlidingWindowRecordSaturates records far more than a field holds into
// one slice and checks that the count stops at the field's maximum and its
// neighbours in the same word keep their counts.
func TestSlidingWindowRecordSaturates(t *testing.T) {
	for _, limit := range []int64{600, 65535, 65536, MaxLimit} {
		a := mustNew(t, Config{Algorithm: SlidingWindow, Limit: limit, Window: 12 * time.Second}).(*slidingWindow)
		field := int64(math.MaxUint16)
		if limit >= 1<<16 {
			field = math.MaxUint32
		}
		s := make([]int64, a.Words())
		// Slices 0..3 share the first word when counts are 16 bits wide,
		// slices 0..1 when they are 32.
		for z := int64(0); z < 4; z++ {
			a.Record(s, z*a.slice, z+1)
		}
		for range 5 {
			a.Record(s, 1*a.slice, MaxLimit) // into slice 1, again and again
		}
		for z, want := range []int64{1, field, 3, 4} {
			if got := a.count(s, int64(z)); got != want {
				t.Errorf("limit %d: slice %d holds %d, want %d", limit, z, got, want)
			}
		}
		// Once slice 1 has stopped counting, slices 2 and 3 count 7 units.
		now := int64(13) * a.slice
		if d := a.Peek(s, now, 1); !d.Allowed || d.Remaining != limit-7-1 {
			t.Errorf("limit %d: after slice 1 expired got %+v, want remaining %d", limit, d, limit-8)
		}
		// Decide never pushes a slice above the limit, so never into a
		// neighbour: fill slice 14 to the limit.
		s = make([]int64, a.Words())
		a.Record(s, 13*a.slice, 1)
		if d := a.Decide(s, 14*a.slice, limit-1); !d.Allowed {
			t.Fatalf("limit %d: %+v", limit, d)
		}
		if d := a.Decide(s, 14*a.slice, 1); d.Allowed {
			t.Errorf("limit %d: allowed above the limit: %+v", limit, d)
		}
		a.Record(s, 15*a.slice, 1)
		for z, want := range map[int64]int64{13: 1, 14: limit - 1, 15: 1} {
			if got := a.count(s, z); got != want {
				t.Errorf("limit %d: slice %d holds %d, want %d", limit, z, got, want)
			}
		}
	}
}

// TestSlidingWindowFastPath checks that sliding-window's Decide, which
// decides an allowed request in the newest slice by itself, decides and
// records exactly as decide does.
func TestSlidingWindowFastPath(t *testing.T) {
	checkFastPath(t, SlidingWindow, func(a Algorithm, s []int64, now, cost int64) Decision {
		return a.(*slidingWindow).decide(s, now, cost, true)
	})
}
