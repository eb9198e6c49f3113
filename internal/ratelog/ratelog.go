// Package ratelog spaces out the log records of an event that may recur
// thousands of times a second (a refused connection, a failed upstream), so
// a flood of them cannot flood the log: at most one record per interval,
// carrying how many events it stands for.
package ratelog

import (
	"sync/atomic"
	"time"
)

// Every lets one record through per interval. It takes no lock; it is safe
// for concurrent use.
type Every struct {
	interval time.Duration
	now      func() time.Time
	last     atomic.Int64 // unix ns of the last record; 0 before the first
	pending  atomic.Int64 // events since the last record
}

// New returns an Every that lets a record through at most once per
// interval (0: every event).
func New(interval time.Duration) *Every {
	return &Every{interval: interval, now: time.Now}
}

// Add counts one event and reports whether a record is due, with the
// number of events the record stands for: this one and those since the
// previous record. The first event is always recorded.
func (e *Every) Add() (int64, bool) {
	e.pending.Add(1)
	now := e.now().UnixNano()
	last := e.last.Load()
	if last != 0 && now-last < int64(e.interval) {
		return 0, false
	}
	if !e.last.CompareAndSwap(last, max(now, 1)) {
		return 0, false // another goroutine writes this record
	}
	return e.pending.Swap(0), true
}
