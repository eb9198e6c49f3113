package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// TestDifferentialBoundedLogLateRecord merges events the way delayed nodes
// push them (eight nodes, each sending its own events every 200 ms, and all
// of them their backlog after a 10 s outage) into bounded logs, and requires
// the script's state after every push, and the decisions at the end, to
// equal the Go ones: late events take every branch of Record (joining,
// filling gaps, moving to a later entry, inserting, a full ring).
func TestDifferentialBoundedLogLateRecord(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for ci, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute, Tolerance: 0.05},
		{Algorithm: algorithm.BoundedLog, Limit: 20, Window: 7 * time.Second, Tolerance: 0.1},
		{Algorithm: algorithm.BoundedLog, Limit: 7, Window: 3 * time.Second, Tolerance: 0.3},
	} {
		a := mustAlg(t, c)
		ref := &goRef{alg: a, states: map[string][]int64{}}
		rng := rand.New(rand.NewPCG(uint64(ci), 3))
		key := fmt.Sprintf("late-%d", ci)
		ms := int64(time.Millisecond)
		// The limit's rate, or on average twice it, over three windows.
		var pending [8][]store.Event
		var next [8]int64
		for i := range next {
			next[i] = t0 + rng.Int64N(200)*ms
		}
		end := t0 + 3*int64(c.Window)
		outFrom, outTo := t0+int64(c.Window), t0+int64(c.Window)+10*int64(time.Second)
		for now := t0; now < end; {
			if ci == 0 {
				now += 100 * ms // exactly the limit's rate: entries span exactly W*m/L
			} else {
				now += (1 + rng.Int64N(int64(c.Window)/ms/c.Limit)) * ms
			}
			node := rng.IntN(8)
			pending[node] = append(pending[node], store.Event{Time: now, Cost: 1 + rng.Int64N(2)})
			for i := range next {
				if next[i] > now || (next[i] >= outFrom && next[i] < outTo) {
					if next[i] <= now {
						next[i] += 200 * ms
					}
					continue
				}
				next[i] += 200 * ms
				if len(pending[i]) == 0 {
					continue
				}
				for _, e := range pending[i] {
					a.Record(ref.state(key), e.Time, e.Cost)
				}
				b := []store.SyncBatch{{Algorithm: a, Key: key, Events: pending[i]}}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(b[0].State, ref.state(key)) {
					t.Fatalf("%v: state after a push at +%v:\nredis %v\ngo    %v", c, time.Duration(now-t0), b[0].State, ref.state(key))
				}
				pending[i] = nil
			}
		}
		for _, at := range []int64{end, end + int64(c.Window)/3, end + int64(c.Window)/2} {
			want := micros(a.Decide(ref.state(key), at, 1))
			got, err := s.DecideOne(ctx, at, store.Request{Algorithm: a, Key: key, Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%v at +%v:\nredis %+v\ngo    %+v", c, time.Duration(at-t0), got, want)
			}
		}
	}
}
