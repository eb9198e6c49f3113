package distributed

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of the centralized arrangement's adaptive deadline.
const (
	// defaultMaxDeadline is Options.MaxDeadline when left zero.
	defaultMaxDeadline = 250 * time.Millisecond
	// deadlineFactor times the slowest recent round trip is the deadline.
	deadlineFactor = 3
	// latencyPeriod is how long a slow round trip keeps raising the
	// deadline: it counts for this period and the next.
	latencyPeriod = time.Second
)

// latency tracks the slowest round trip to the shared store over the
// current and the previous period, for the adaptive deadline: the
// deadline is deadlineFactor times that, between floor and ceiling. A call
// that misses its deadline counts as a round trip of that long (so the
// deadline triples while the store is slow, up to the ceiling); the
// abandoned call runs on to the ceiling and, if it answers, counts as its
// real round trip.
type latency struct {
	floor, ceiling time.Duration
	start          atomic.Int64 // when the current period began, Unix ns
	cur, prev      atomic.Int64 // slowest round trip (ns) in each period
	answered       atomic.Int64 // when the store last answered, Unix ns
	inflight       atomic.Int64 // calls to the store not yet returned (abandoned ones too)
}

// init sets the floor and the ceiling (zero: defaultMaxDeadline, or the
// floor if that is longer).
func (l *latency) init(floor, ceiling time.Duration) error {
	if ceiling == 0 {
		ceiling = max(defaultMaxDeadline, floor)
	}
	if ceiling < floor {
		return fmt.Errorf("distributed: MaxDeadline %v is below Deadline %v", ceiling, floor)
	}
	l.floor, l.ceiling = floor, ceiling
	l.start.Store(time.Now().UnixNano())
	return nil
}

// rotate starts a new period if the current one is over.
func (l *latency) rotate(now int64) {
	s := l.start.Load()
	if now-s < int64(latencyPeriod) || !l.start.CompareAndSwap(s, now) {
		return
	}
	if now-s >= 2*int64(latencyPeriod) {
		l.prev.Store(0) // a quiet period in between
		l.cur.Store(0)
		return
	}
	l.prev.Store(l.cur.Swap(0))
}

// observe records a round trip of d ending at now.
func (l *latency) observe(now int64, d time.Duration) {
	l.rotate(now)
	for {
		c := l.cur.Load()
		if int64(d) <= c || l.cur.CompareAndSwap(c, int64(d)) {
			return
		}
	}
}

// deadline returns the deadline for a call starting at now: the ceiling
// while nothing has been measured for two periods.
func (l *latency) deadline(now int64) time.Duration {
	l.rotate(now)
	slowest := max(l.cur.Load(), l.prev.Load())
	if slowest == 0 {
		return l.ceiling
	}
	d := deadlineFactor * time.Duration(slowest)
	return min(max(d, l.floor), l.ceiling)
}

// errMissed marks a store call that missed an adaptive deadline below the
// ceiling: the decision goes to the failure policy, but the store is not
// counted as failing (the breaker opens on errors and on calls that reach
// the ceiling).
var errMissed = errors.New("missed the adaptive deadline")

// timedCall runs f, a call to the shared store made while deciding, under
// the adaptive deadline, and feeds its round trip to the estimate. f runs
// with the ceiling as its deadline. At the adaptive deadline, if the store
// has answered some other call since f started, it is slow but alive, and
// the wait goes on to the ceiling. So it does when f is the only call in
// flight and the breaker is closed: with nothing else sent, no answer was
// missing, and light traffic (one call at a time) would otherwise send
// every call slower than twice the deadline to the failure policy on a
// healthy store. Otherwise, with other calls unanswered or as the breaker's
// probe, the wait goes on once as long again (the process itself may have
// been stalled, with answers unread), and then timedCall returns (an error
// wrapping errMissed when that was below the ceiling) and f runs on in the
// background to teach the estimate.
func (n *Node) timedCall(ctx context.Context, f func(context.Context) error) error {
	start := time.Now()
	d := n.lat.deadline(start.UnixNano())
	cctx, cancel := context.WithTimeout(ctx, n.lat.ceiling)
	done := make(chan error, 1)
	n.lat.inflight.Add(1)
	go func() {
		defer cancel()
		err := f(cctx)
		n.lat.inflight.Add(-1)
		if err == nil {
			end := time.Now()
			n.lat.observe(end.UnixNano(), end.Sub(start))
			n.lat.answered.Store(end.UnixNano())
		}
		done <- err
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	// At the deadline, one grace as long again: this process may itself
	// have been descheduled, with answers waiting to be read.
	graced := false
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-cctx.Done():
		case <-t.C:
			left := n.lat.ceiling - time.Since(start)
			if left <= 0 {
				break
			}
			if n.lat.answered.Load() > start.UnixNano() || (n.lat.inflight.Load() == 1 && !n.br.isOpen()) {
				t.Reset(left) // slow but alive, or nothing to tell: wait to the ceiling
				continue
			}
			if !graced {
				graced = true
				t.Reset(min(d, left))
				continue
			}
		}
		break
	}
	select {
	case err := <-done: // it answered as the wait ended
		return err
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	n.lat.observe(time.Now().UnixNano(), d)
	if d < n.lat.ceiling {
		n.missed.Add(1)
		return fmt.Errorf("shared store did not answer within %v: %w", d, errMissed)
	}
	return fmt.Errorf("shared store did not answer within %v (the ceiling): %w", d, context.DeadlineExceeded)
}

// decideFailed records the failure of a decision's store call: a missed
// adaptive deadline is not a store failure, but if the call was the open
// breaker's probe it gives the probe's slot back, or no call would probe
// again and the breaker would stay open for good.
func (n *Node) decideFailed(err error) {
	if errors.Is(err, errMissed) {
		n.br.abandon()
		return
	}
	n.storeFailed(err)
}
