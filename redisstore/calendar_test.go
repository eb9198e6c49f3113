package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestCalendarDifferential decides and merges random traffic on calendar
// windows across month ends, a leap day and daylight-saving changes in two
// zones, on Redis (with the caller's clock) and on the memory store: every
// decision and every merged state must be equal, the time to the period's
// end included, to the microsecond. The script knows no time zone: the
// periods' boundaries it decides with come with each call.
func TestCalendarDifferential(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		cal        algorithm.Calendar
		carry      int64
		start, end string
		step       time.Duration // the most between two requests
	}{
		// New York: the month of the March change of clocks, into April,
		// billing on the 31st through a leap February.
		{algorithm.Calendar{Period: "month", Zone: "America/New_York"}, 0, "2025-02-20T00:00:00Z", "2025-04-10T00:00:00Z", 20 * time.Hour},
		{algorithm.Calendar{Period: "month", Zone: "America/New_York", Start: 31}, 40, "2024-01-15T00:00:00Z", "2024-05-05T00:00:00Z", 30 * time.Hour},
		// Sydney's days across its October change (a 23-hour day) and
		// April's (25 hours), with carry-over.
		{algorithm.Calendar{Period: "day", Zone: "Australia/Sydney"}, 5, "2025-10-02T00:00:00Z", "2025-10-08T00:00:00Z", 40 * time.Minute},
		{algorithm.Calendar{Period: "day", Zone: "Australia/Sydney"}, 0, "2025-04-03T00:00:00Z", "2025-04-09T00:00:00Z", 40 * time.Minute},
		// Days with idle ones between them, which carry nothing.
		{algorithm.Calendar{Period: "day", Zone: "Europe/Berlin"}, 5, "2025-03-20T00:00:00Z", "2025-04-20T00:00:00Z", 60 * time.Hour},
		// Weeks from Monday across New York's November change.
		{algorithm.Calendar{Period: "week", Zone: "America/New_York", Start: 1}, 10, "2025-10-20T00:00:00Z", "2025-11-20T00:00:00Z", 5 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.cal.String(), func(t *testing.T) {
			s := newStore(t, Options{ClientTime: true})
			mem := memstore.New(memstore.Options{})
			a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 20, CarryOver: c.carry, Calendar: c.cal})
			rng := rand.New(rand.NewPCG(7, uint64(len(c.start))))
			begin, _ := time.Parse(time.RFC3339, c.start)
			stop, _ := time.Parse(time.RFC3339, c.end)
			now := begin.UnixNano()
			for step := 0; now < stop.UnixNano(); step++ {
				now += rng.Int64N(int64(c.step)) / int64(time.Millisecond) * int64(time.Millisecond)
				key := []string{"x", "y"}[rng.IntN(2)]
				cost := 1 + rng.Int64N(4)
				if rng.IntN(5) == 0 {
					// A merge, as a delayed node pushes it, of an event up to
					// an hour late, then the key's state.
					ev := []store.Event{{Time: now - rng.Int64N(int64(time.Hour)), Cost: cost}}
					want := []store.SyncBatch{{Algorithm: a, Key: key, Events: ev}}
					got := []store.SyncBatch{{Algorithm: a, Key: key, Events: ev}}
					if err := mem.Sync(ctx, now, want); err != nil {
						t.Fatal(err)
					}
					if err := s.Sync(ctx, now, got); err != nil {
						t.Fatal(err)
					}
					if !equalStates(got[0].State, want[0].State) {
						t.Fatalf("step %d at %v: merged state redis %v, mem %v", step, time.Unix(0, now).UTC(), got[0].State, want[0].State)
					}
					continue
				}
				req := store.Request{Algorithm: a, Key: key, Cost: cost}
				want, err := mem.DecideOne(ctx, now, req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.DecideOne(ctx, now, req)
				if err != nil {
					t.Fatal(err)
				}
				if got != micros(want) {
					t.Fatalf("step %d at %v:\nredis %+v\nmem   %+v", step, time.Unix(0, now).UTC(), got, micros(want))
				}
				if start, end := a.(interface{ Period(int64) (int64, int64) }).Period(now); want.ResetAfter != time.Duration(end-now) || now < start {
					t.Fatalf("step %d: reset after %v, the period ends in %v", step, want.ResetAfter, time.Duration(end-now))
				}
			}
		})
	}
}

// equalStates reports whether two states hold the same words.
func equalStates(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCalendarServerTime decides a calendar window on the Redis server's
// own clock while the caller's clock is a minute off either way: the
// script still finds the period holding its own time among the boundaries
// the caller sent, and reports the time to that period's end.
func TestCalendarServerTime(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, Options{})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Calendar: algorithm.Calendar{Period: "day", Zone: "Asia/Kolkata"}})
	for i, skew := range []time.Duration{-time.Minute, time.Minute, 0} {
		at := time.Now()
		d, err := s.DecideOne(ctx, at.Add(skew).UnixNano(), store.Request{Algorithm: a, Key: "k", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, end := a.(interface{ Period(int64) (int64, int64) }).Period(at.UnixNano())
		want := time.Duration(end - at.UnixNano())
		if !d.Allowed || d.Remaining != int64(2-i) || d.ResetAfter < want-5*time.Second || d.ResetAfter > want+5*time.Second {
			t.Fatalf("caller's clock %v off: %+v, want the period's end in about %v", skew, d, want)
		}
	}
}
