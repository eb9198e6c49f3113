package distributed

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a circuit breaker over the shared store. It opens after
// threshold consecutive failures; while open no call is made until cooldown
// has passed, then one call at a time is let through as a probe (half-open).
// A successful probe closes it; a failed one opens it for another cooldown.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	failures int       // consecutive failures
	open     bool      // open or half-open
	openedAt time.Time // when it last opened
	probing  bool      // a half-open probe is in flight
	opened   uint64    // how many times it has opened

	// openFlag mirrors open for readers on the decision path, who must
	// not contend on mu.
	openFlag atomic.Bool
}

// allow reports whether a store call may be made at now. If the breaker is
// open and the cooldown has passed, the first caller gets true and becomes
// the probe; its outcome must be reported with success or failure.
func (b *breaker) allow(now time.Time) bool {
	if !b.openFlag.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true
	}
	if b.probing || now.Sub(b.openedAt) < b.cooldown {
		return false
	}
	b.probing = true
	return true
}

// success records a successful call. It reports whether the breaker was
// open (so the caller knows the store has just come back).
func (b *breaker) success() (recovered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	recovered = b.open
	b.failures, b.open, b.probing = 0, false, false
	b.openFlag.Store(false)
	return recovered
}

// failure records a failed call at now. It reports whether this failure
// opened the breaker.
func (b *breaker) failure(now time.Time) (opened bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.open {
		// A failed probe: stay open for another cooldown.
		b.probing = false
		b.openedAt = now
		return false
	}
	if b.failures >= b.threshold {
		b.open, b.openedAt, b.probing = true, now, false
		b.openFlag.Store(true)
		b.opened++
		return true
	}
	return false
}

// abandon releases a probe slot without an outcome (the caller's own
// context ended, which says nothing about the store).
func (b *breaker) abandon() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// isOpen reports whether the breaker is open or half-open.
func (b *breaker) isOpen() bool { return b.openFlag.Load() }

// openings returns how many times the breaker has opened.
func (b *breaker) openings() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened
}
