package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestRedisCalendarArrangements: a daily budget of 100 in New York time,
// three nodes on a real Redis in each arrangement, one request a minute
// from Friday noon to Tuesday noon, through the 25-hour Sunday when the
// clocks go back. Each local day counts from its midnight: centralized
// admits exactly the first 100 requests of every day, split its three
// shares of 33, delayed at least 100 and at most 100 plus one per other
// node; and a decision a minute before the long Sunday ends reports the
// minute left, to the microsecond.
func TestRedisCalendarArrangements(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100,
		Calendar: algorithm.Calendar{Period: "day", Zone: "America/New_York"}})
	period := rule.(interface{ Period(int64) (int64, int64) })
	ny, _ := time.LoadLocation("America/New_York")
	begin := time.Date(2025, 10, 31, 12, 0, 0, 0, ny)
	stop := time.Date(2025, 11, 4, 12, 0, 0, 0, ny)
	sundayEnd := time.Date(2025, 11, 3, 0, 0, 0, 0, ny)
	for _, arr := range distributed.Arrangements() {
		t.Run(string(arr), func(t *testing.T) {
			clk := disttest.NewClock()
			clk.Set(begin.UnixNano())
			nodes := make([]*distributed.Node, 3)
			for k := range nodes {
				nodes[k] = mustNode(t, distributed.Options{Arrangement: arr, Nodes: 3, Shared: shared, Clock: clk.Now, ManualSync: true,
					Deadline: time.Second, SyncDeadline: time.Second, ID: fmt.Sprintf("%s-%d", t.Name(), k)})
			}
			key := "calendar-" + string(arr)
			perDay := map[int64]int{} // accepted per period start
			firstRejected := map[int64]int64{}
			for i := 0; clk.NS() < stop.UnixNano(); i++ {
				now := clk.NS()
				if arr == distributed.Delayed {
					for _, n := range nodes {
						n.Sync(ctx)
					}
				}
				d, err := nodes[i%3].DecideOne(ctx, now, store.Request{Algorithm: rule, Key: key, Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				start, end := period.Period(now)
				if d.ResetAfter != time.Duration(end-now) {
					t.Fatalf("at %v: reset after %v, the day ends in %v", time.Unix(0, now).In(ny), d.ResetAfter, time.Duration(end-now))
				}
				if d.Allowed {
					perDay[start]++
					if _, ok := firstRejected[start]; ok && arr == distributed.Centralized {
						t.Fatalf("at %v: allowed after a rejection the same day", time.Unix(0, now).In(ny))
					}
				} else if _, ok := firstRejected[start]; !ok {
					firstRejected[start] = now
				}
				if now == sundayEnd.Add(-time.Minute).UnixNano() && d.ResetAfter != time.Minute {
					t.Fatalf("a minute before the long Sunday ends: reset after %v", d.ResetAfter)
				}
				clk.Add(time.Minute)
			}
			friday := time.Date(2025, 10, 31, 0, 0, 0, 0, ny).UnixNano() // from noon only
			for start, n := range perDay {
				lo, hi := 100, 100
				switch arr {
				case distributed.Split:
					lo, hi = 99, 99
				case distributed.Delayed:
					hi = 102
				}
				if start != friday && (n < lo || n > hi) {
					t.Errorf("%s: %d accepted, want %d to %d", time.Unix(0, start).In(ny).Format("Mon Jan 2"), n, lo, hi)
				}
			}
			if len(perDay) != 5 {
				t.Errorf("%d days counted, want 5 (Friday to Tuesday)", len(perDay))
			}
		})
	}
}
