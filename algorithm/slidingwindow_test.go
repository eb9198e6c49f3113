package algorithm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
		t.Run(fmt.Sprintf("L=%d,slices=%d", tc.limit, tc.slices), func(t *testing.T) {
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
		})
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

// TestDecideNarrowMatchesDecide checks DecideNarrow against Decide: on
// random states with 32-bit counts below 65,536 (so a narrow form exists),
// random clocks around the newest slice and random costs, wherever
// DecideNarrow decides, its decision is Decide's and its narrow state is
// Decide's state in 16-bit fields; where it declines, it changed nothing.
func TestDecideNarrowMatchesDecide(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 32))
	decided := 0
	for range 200_000 {
		nSlices := 1 + r.IntN(16)
		limit := int64(1<<16) + r.Int64N(MaxLimit-1<<16)
		if r.IntN(3) == 0 {
			limit = 1<<16 + r.Int64N(1<<18)
		}
		slice := int64(time.Second)
		a := newSlidingWindow(Config{Algorithm: SlidingWindow, Limit: limit, Window: time.Duration(int64(nSlices) * slice), Slices: nSlices})
		if a.narrow == nil {
			t.Fatalf("limit %d: no narrow twin", limit)
		}
		wide := make([]int64, a.words)
		wide[0] = 1_000_000 + r.Int64N(100)
		for p := range int64(nSlices) {
			if r.IntN(3) > 0 {
				a.setAt(wide, p, r.Int64N(1<<16))
			}
		}
		narrow := make([]int64, a.narrow.words)
		narrow[0] = wide[0]
		for p := range int64(nSlices) {
			a.narrow.setAt(narrow, p, a.countAt(wide, p))
		}
		before := append([]int64(nil), narrow...)
		now := wide[0]*slice + r.Int64N(3*slice) - slice/2
		cost := 1 + r.Int64N(1<<16)
		if r.IntN(4) == 0 {
			cost = 1 + r.Int64N(limit)
		}
		got, ok := a.DecideNarrow(narrow, now, cost)
		if !ok {
			if !slices.Equal(narrow, before) {
				t.Fatalf("declined but changed the state: %v to %v", before, narrow)
			}
			continue
		}
		decided++
		want := a.Decide(wide, now, cost)
		if got != want {
			t.Fatalf("slices %d limit %d state %v now %d cost %d: narrow %+v, Decide %+v", nSlices, limit, before, now, cost, got, want)
		}
		if narrow[0] != wide[0] {
			t.Fatalf("newest slice: narrow %d, wide %d", narrow[0], wide[0])
		}
		for p := range int64(nSlices) {
			if a.narrow.countAt(narrow, p) != a.countAt(wide, p) {
				t.Fatalf("position %d: narrow %d, wide %d", p, a.narrow.countAt(narrow, p), a.countAt(wide, p))
			}
		}
	}
	if decided < 50_000 {
		t.Fatalf("DecideNarrow decided %d of 200,000; the test means to exercise it", decided)
	}
}
