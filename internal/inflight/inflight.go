// Package inflight lets a bounded number of calls to a server be in flight
// and gathers the requests that arrive beyond them, so that they go out
// together in one call as soon as one returns: light traffic waits for
// nothing, heavy traffic shares calls. The Redis store's script calls and
// the envoy-ratelimit compatible mode's pipelines are sent this way.
package inflight

import "sync"

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
