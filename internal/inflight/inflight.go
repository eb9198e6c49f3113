// Package inflight lets a bounded number of calls to a server be in flight
// and gathers the requests that arrive beyond them, so that they go out
// together in one call as soon as one returns: light traffic waits for
// nothing, heavy traffic shares calls. The Redis store's script calls and
// the envoy-ratelimit compatible mode's pipelines are sent this way.
package inflight

import (
	"context"
	"sync"
	"time"
)

// Queue holds the places in flight and the requests waiting for one. The
// zero value is ready to use.
type Queue[T any] struct {
	mu       sync.Mutex
	inflight int
	waiting  []T
}

// Enter takes a place in flight when fewer than max are taken and reports
// true: the caller sends its request alone at once, then calls Next. Else
// it queues the request made by item and reports false: the request goes
// out with the next batch, sent by the goroutine holding a place.
func (q *Queue[T]) Enter(max int, item func() T) (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight < max {
		q.inflight++
		var none T
		return none, true
	}
	it := item()
	q.waiting = append(q.waiting, it)
	return it, false
}

// Next is called by the holder of a place when its call has returned: it
// takes up to limit waiting requests, in arrival order, for the holder to
// send, or gives the place back and returns nil when none is waiting.
func (q *Queue[T]) Next(limit int) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.waiting), limit)
	if n == 0 {
		q.inflight--
		return nil
	}
	batch := q.waiting[:n:n]
	if n == len(q.waiting) {
		q.waiting = nil
	} else {
		q.waiting = q.waiting[n:]
	}
	return batch
}

// InFlight returns how many places are taken.
func (q *Queue[T]) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// Waiting returns how many requests wait to go out.
func (q *Queue[T]) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// StillWaiting returns the requests of batch whose caller is still waiting
// (ctx of each not done), in order, and the latest of their deadlines, a
// request without one counting as now + timeout: the deadline of the call
// that carries them. gaveUp is called for each of the others with its
// context's error, to answer it.
func StillWaiting[T any](batch []T, ctx func(T) context.Context, timeout time.Duration, gaveUp func(T, error)) ([]T, time.Time) {
	live := batch[:0:0]
	var last time.Time
	for _, it := range batch {
		c := ctx(it)
		if err := c.Err(); err != nil {
			gaveUp(it, err)
			continue
		}
		dl, ok := c.Deadline()
		if !ok {
			dl = time.Now().Add(timeout)
		}
		if dl.After(last) {
			last = dl
		}
		live = append(live, it)
	}
	return live, last
}
