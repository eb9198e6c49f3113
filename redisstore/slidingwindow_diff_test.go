package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDifferentialSlidingWindowSaturation merges more units into single
// slices than a packed count holds, for limits packed 16 and 32 bits wide,
// and requires the script's state and decisions to equal the Go ones: both
// saturate at the Go field's maximum and leave the neighbouring slices alone.
func TestDifferentialSlidingWindowSaturation(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for _, limit := range []int64{600, 65535, 65536, algorithm.MaxLimit} {
		a := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: limit, Window: 12 * time.Second})
		ref := &goRef{alg: a, states: map[string][]int64{}}
		key := "sat"
		slice := int64(time.Second)
		now := t0
		evs := []store.Event{{Time: now, Cost: 3}, {Time: now + slice, Cost: 5}, {Time: now + 2*slice, Cost: 7}}
		// Slice 1 passes 2^16 without reaching 2^32; slice 2 passes 2^32.
		for range 3 {
			evs = append(evs, store.Event{Time: now + slice, Cost: 100_000},
				store.Event{Time: now + 2*slice, Cost: algorithm.MaxLimit})
		}
		for _, e := range evs {
			a.Record(ref.state(key), e.Time, e.Cost)
		}
		b := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}}
		if err := s.Sync(ctx, now+2*slice, b); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b[0].State, ref.state(key)) {
			t.Fatalf("limit %d: state after saturating merges:\nredis %v\ngo    %v", limit, b[0].State, ref.state(key))
		}
		// Decide while the saturated slice counts and after it has left.
		for _, at := range []int64{now + 3*slice, now + 12*slice, now + 13*slice, now + 14*slice} {
			for _, cost := range []int64{1, limit / 2, limit} {
				want := micros(a.Decide(ref.state(key), at, cost))
				got, err := s.DecideOne(ctx, at, store.Request{Algorithm: a, Key: key, Cost: cost})
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("limit %d at +%v cost %d:\nredis %+v\ngo    %+v", limit, time.Duration(at-now), cost, got, want)
				}
			}
		}
	}
}
