// Package sim runs Floodgate's real limiter under a virtual clock and
// measures how well it keeps the promise: the busiest window of accepted
// requests, and the compliant requests it turned away.
//
// Nothing here models an algorithm. Run builds a fresh floodgate.Limiter
// (with its own in-memory store) whose clock is a variable the simulator
// sets before each request, and asks it AllowN exactly as a server would.
//
// Times are offsets from virtual time zero, which is always a window
// boundary: fixed and sliding windows start there, as in the model of the
// published rate-limiter design whose tables the simulator reproduces (the
// baseline).
package sim

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
)

// Request is one simulated request.
type Request struct {
	// At is when the request arrives, as an offset from virtual time zero.
	At time.Duration
	// Key is the counter key.
	Key string
	// Cost is the request's weight; zero means 1.
	Cost int64
}

func (r Request) cost() int64 {
	if r.Cost <= 0 {
		return 1
	}
	return r.Cost
}

// Outcome is what the limiter decided for one request.
type Outcome struct {
	// Allowed reports whether the request was accepted.
	Allowed bool
	// Effective is when an accepted request proceeds: its arrival time plus
	// the decision's Delay (only leaky-bucket delays).
	Effective time.Duration
	// Decision is the limiter's full answer.
	Decision floodgate.Decision
}

// base is the wall-clock instant virtual time zero is aligned near: the
// simulator picks the window boundary at or before it.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Epoch returns the wall-clock instant virtual time zero maps to for a
// limit with the given window: a multiple of the window since the Unix
// epoch, so that fixed windows and window slices start at virtual zero.
func Epoch(window time.Duration) time.Time {
	ns := base.UnixNano()
	if window > 0 {
		ns -= ns % int64(window)
	}
	return time.Unix(0, ns).UTC()
}

// Clock is a virtual clock. Its zero value reads the Unix epoch; Set moves
// it. It is not safe for concurrent use; the simulator is single-threaded.
type Clock struct{ now time.Time }

// Now returns the clock's time. Pass it to floodgate.WithClock.
func (c *Clock) Now() time.Time { return c.now }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.now = t }

// Run replays reqs, which must be sorted by At, through a fresh limiter for
// limit under a virtual clock and returns one outcome per request.
//
// With the concurrency algorithm each accepted request is released right
// after it is decided, as if it took no time; with leaky-bucket an accepted
// request counts as proceeding at its arrival time plus its Delay.
func Run(ctx context.Context, limit floodgate.Limit, reqs []Request) ([]Outcome, error) {
	var clock Clock
	lim, err := floodgate.New(limit, floodgate.WithClock(clock.Now))
	if err != nil {
		return nil, err
	}
	epoch := Epoch(lim.Limit().Window)
	release := lim.Limit().Algorithm == algorithm.Concurrency
	out := make([]Outcome, len(reqs))
	for i, r := range reqs {
		if i > 0 && r.At < reqs[i-1].At {
			return nil, fmt.Errorf("sim: request %d at %v comes before request %d at %v: requests must be sorted by time", i, r.At, i-1, reqs[i-1].At)
		}
		clock.Set(epoch.Add(r.At))
		var d floodgate.Decision
		var err error
		if release {
			var l *floodgate.Lease
			if l, err = lim.Acquire(ctx, r.Key, r.cost()); err == nil {
				d = l.Decision
				err = l.Release(ctx)
			}
		} else {
			d, err = lim.AllowN(ctx, r.Key, r.cost())
		}
		if err != nil {
			return nil, fmt.Errorf("sim: request %d at %v: %w", i, r.At, err)
		}
		out[i] = Outcome{Allowed: d.Allowed, Effective: r.At + d.Delay, Decision: d}
	}
	return out, nil
}

// Event is a time and a weight: a request's arrival (for what was sent) or
// its effective time (for what was accepted).
type Event struct {
	At   time.Duration
	Cost int64
}

// Busiest returns the largest total cost of events inside any interval of
// length window: two events at t_j <= t_i are in one interval when
// t_i - t_j < window. It sorts events in place by time.
func Busiest(events []Event, window time.Duration) int64 {
	sortEvents(events)
	var best, sum int64
	j := 0
	for i := range events {
		sum += events[i].Cost
		for events[i].At-events[j].At >= window {
			sum -= events[j].Cost
			j++
		}
		best = max(best, sum)
	}
	return best
}

func sortEvents(events []Event) {
	if !sort.SliceIsSorted(events, func(a, b int) bool { return events[a].At < events[b].At }) {
		sort.SliceStable(events, func(a, b int) bool { return events[a].At < events[b].At })
	}
}

// Sent returns one event per request, at its arrival.
func Sent(reqs []Request) []Event {
	ev := make([]Event, len(reqs))
	for i, r := range reqs {
		ev[i] = Event{r.At, r.cost()}
	}
	return ev
}

// Accepted returns one event per accepted request, at its effective time,
// sorted by time.
func Accepted(reqs []Request, outs []Outcome) []Event {
	var ev []Event
	for i, o := range outs {
		if o.Allowed {
			ev = append(ev, Event{o.Effective, reqs[i].cost()})
		}
	}
	sortEvents(ev)
	return ev
}

// FalseRejects counts the rejected requests whose key, counting that
// request, had sent at most limit cost units in the trailing window: the
// requests of the same key at or before it in reqs (which is sorted by time)
// that arrived less than window before it. Every such rejection breaks the
// promise that a client under the limit is never turned away.
func FalseRejects(reqs []Request, outs []Outcome, limit int64, window time.Duration) int {
	type tail struct {
		idx []int // indices of this key's requests still in the window
		sum int64
	}
	keys := map[string]*tail{}
	n := 0
	for i, r := range reqs {
		k := keys[r.Key]
		if k == nil {
			k = &tail{}
			keys[r.Key] = k
		}
		k.idx = append(k.idx, i)
		k.sum += r.cost()
		for len(k.idx) > 0 && r.At-reqs[k.idx[0]].At >= window {
			k.sum -= reqs[k.idx[0]].cost()
			k.idx = k.idx[1:]
		}
		if !outs[i].Allowed && k.sum <= limit {
			n++
		}
	}
	return n
}

// Summary is the promise's measures for one run.
type Summary struct {
	Requests int   // requests sent
	Accepted int   // requests accepted
	Rejected int   // requests rejected
	Busiest  int64 // most cost units accepted in any window-long interval
	// FalseRejects counts rejections of a key that was within its limit;
	// see FalseRejects.
	FalseRejects int
}

// Summarize measures one run of reqs with outcomes outs against limit.
func Summarize(reqs []Request, outs []Outcome, limit int64, window time.Duration) Summary {
	s := Summary{Requests: len(reqs)}
	for _, o := range outs {
		if o.Allowed {
			s.Accepted++
		} else {
			s.Rejected++
		}
	}
	s.Busiest = Busiest(Accepted(reqs, outs), window)
	s.FalseRejects = FalseRejects(reqs, outs, limit, window)
	return s
}
