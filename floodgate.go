// Package floodgate is a rate limiter that keeps its promise: no more than
// the limit gets through in any window-long interval (within a stated
// tolerance), and a client under the limit is never turned away.
//
// A Limiter enforces one limit per key:
//
//	lim, err := floodgate.New(floodgate.Limit{Limit: 600, Window: time.Minute})
//	...
//	d, err := lim.Allow(ctx, clientID)
//	if !d.Allowed {
//		// reject; retry after d.RetryAfter
//	}
//
// The algorithm defaults to bounded-log; see package algorithm for the
// others and for what each Decision field means. State lives in a private
// in-memory store (package memstore) unless WithStore says otherwise; a
// decision on a key already seen allocates nothing. Rule sets with several
// limits per request are in package rules.
package floodgate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// Decision is the outcome of one request: whether it is allowed, the
// remaining allowance and how long to wait. See algorithm.Decision.
type Decision = algorithm.Decision

// Limit describes a limit: algorithm, limit, window and the algorithm's
// parameters. See algorithm.Config.
type Limit = algorithm.Config

// Allower decides one request for a key. *Limiter implements it, and so does
// the client of a Floodgate server (package rlsclient); the HTTP middleware
// (package httplimit) and the gRPC interceptors (package grpclimit) take one.
type Allower interface {
	Allow(ctx context.Context, key string) (Decision, error)
}

// Limiter enforces one limit for many keys. It is safe for concurrent use.
type Limiter struct {
	cur   atomic.Pointer[limits] // the limit in force; SetLimit swaps it
	setMu sync.Mutex             // serializes SetLimit
	store store.Store
	clock func() time.Time // nil: start plus the monotonic time since
	start time.Time
	unix0 int64 // start in Unix nanoseconds
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithStore makes the limiter keep its counters in s instead of a private
// in-memory store. Limiters sharing a store share a key's counter only when
// their Limits are equal: state is identified by the limit and the key.
// A nil s means the default.
func WithStore(s store.Store) Option { return func(l *Limiter) { l.store = s } }

// WithClock makes the limiter read time from now instead of its own clock;
// the simulator uses it to run the real limiter under a virtual clock. Wait
// and Throttle still sleep in real time. A nil now means the limiter's own
// clock.
//
// The limiter's own clock is the wall clock as read by New, advanced by the
// monotonic clock: it costs one clock read per decision instead of
// time.Now's two, and a step of the system clock (an administrator or NTP
// setting it) does not move it, so it never hands out or takes away
// allowance by jumping.
func WithClock(now func() time.Time) Option {
	return func(l *Limiter) {
		if now != nil {
			l.clock = now
		}
	}
}

// New returns a limiter for limit, or an error naming what is wrong with it
// (an unknown algorithm, a limit below 1, a window that is not positive).
func New(limit Limit, opts ...Option) (*Limiter, error) {
	start := time.Now()
	l := &Limiter{start: start, unix0: start.UnixNano()}
	for _, o := range opts {
		o(l)
	}
	if l.store == nil {
		l.store = memstore.New(memstore.Options{})
	}
	c, err := l.bind(limit, "")
	if err != nil {
		return nil, err
	}
	l.cur.Store(c)
	return l, nil
}

// Limit returns the limit the limiter enforces, with defaults filled in.
func (l *Limiter) Limit() Limit {
	c := l.cur.Load()
	cfg := c.alg.Config()
	if c.counter != "" {
		cfg.Counter = "" // the limiter's own name for its counter
	}
	return cfg
}

// Allow reports whether one request for key may proceed now, and counts it
// if so. It is AllowN(ctx, key, 1). Keys are any strings (any bytes). The
// in-memory store keeps only a hash of them; a Redis store keeps them in
// its key names.
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	if c := l.cur.Load(); c.mem != nil && c.olds == nil {
		// Start fetching the key's state before reading the clock, so the
		// two overlap.
		k := c.mem.Prefetch(key)
		c.mem.DecideHashedInto(&d, l.now(), k, 1)
		return d, nil
	}
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether a request of cost n for key may proceed now, and
// counts it if so. A cost below 1, or above what the limit could ever
// grant, is rejected with a Reason saying so. An error means the store
// could not decide; the memory store never fails.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	c := l.cur.Load()
	if c.olds != nil {
		return l.allowChanging(ctx, c, key, n)
	}
	if c.mem != nil {
		var d Decision
		k := c.mem.Prefetch(key)
		c.mem.DecideHashedInto(&d, l.now(), k, n)
		return d, nil
	}
	return l.store.DecideOne(ctx, l.now(), store.Request{Algorithm: c.alg, Key: key, Cost: n})
}

// Wait blocks until a request of cost n for key is allowed, counts it, and
// returns its decision, as x/time/rate's WaitN does: a rejected request
// sleeps for its RetryAfter and asks again; an allowed one with a Delay
// (leaky-bucket) sleeps for the delay. It returns an error, with the last
// decision, when the request can never be allowed (its Reason says why),
// when ctx's deadline comes before the request could be allowed (the error
// wraps context.DeadlineExceeded; Wait returns at once when it knows), when
// ctx ends, or when the store fails. An allowed request whose delay ctx cut
// short has been counted all the same.
//
// Wait sleeps in real time, also under WithClock.
func (l *Limiter) Wait(ctx context.Context, key string, n int64) (Decision, error) {
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return d, err
		}
		pause := d.Delay
		if !d.Allowed {
			if d.RetryAfter <= 0 {
				return d, fmt.Errorf("floodgate: Wait(n=%d): %s", n, d.Reason.Message())
			}
			pause = d.RetryAfter
		}
		if pause <= 0 {
			return d, nil
		}
		if deadline, ok := ctx.Deadline(); ok && !d.Allowed && time.Until(deadline) < pause {
			return d, fmt.Errorf("floodgate: Wait(n=%d) would pass the context's deadline: %w", n, context.DeadlineExceeded)
		}
		if err := sleep(ctx, pause); err != nil || d.Allowed {
			return d, err
		}
	}
}

// Throttle decides a request of cost n for key once, as AllowN, and, when
// it is allowed with a Delay (leaky-bucket), sleeps for the delay or until
// ctx is done, whichever comes first. A rejected request returns at once
// with Allowed false; use Wait to wait until it is allowed. It returns
// ctx's error if ctx ends during the delay; the request has been counted
// all the same.
func (l *Limiter) Throttle(ctx context.Context, key string, n int64) (Decision, error) {
	d, err := l.AllowN(ctx, key, n)
	if err != nil || !d.Allowed || d.Delay <= 0 {
		return d, err
	}
	return d, sleep(ctx, d.Delay)
}

// sleep waits for d or until ctx is done, and returns ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Acquire decides a request of cost n for key, as AllowN does, and
// returns what the request holds: Lease.Decision is the decision, and when
// it is allowed, Lease.Release gives back what a concurrency limit took
// when the request ends. Only that Lease can give those units back, once;
// unreleased, they come back when the lease expires (the limit's Window,
// else lease.DefaultTTL), so a caller that crashed does not hold
// its slot for ever. For other algorithms Release does nothing.
//
//	lease, err := lim.Acquire(ctx, key, 1)
//	if err != nil || !lease.Decision.Allowed {
//		// reject
//	}
//	defer lease.Release(ctx)
//
// A store that holds no leases (see store.Leaser) counts the units
// anonymously, and the Lease releases them by key.
func (l *Limiter) Acquire(ctx context.Context, key string, n int64) (*Lease, error) {
	alg := l.cur.Load().alg
	if alg.Name() != algorithm.Concurrency {
		d, err := l.AllowN(ctx, key, n)
		if err != nil {
			return nil, err
		}
		return NewLease(d, nil), nil
	}
	reqs := []store.Request{{Algorithm: alg, Key: key, Cost: n}}
	if ls, ok := l.store.(store.Leaser); ok {
		id := lease.New()
		out := make([]Decision, 1)
		switch err := ls.Acquire(ctx, l.now(), id, reqs, out); {
		case err == nil:
			return NewLease(out[0], func(ctx context.Context) error {
				held, err := ls.ReleaseLease(ctx, l.now(), id, reqs)
				if err == nil && !held {
					err = ErrLeaseNotHeld
				}
				return err
			}), nil
		case !errors.Is(err, store.ErrNoLeases):
			return nil, err
		}
	}
	d, err := l.store.DecideOne(ctx, l.now(), reqs[0])
	if err != nil {
		return nil, err
	}
	return NewLease(d, func(ctx context.Context) error { return l.store.Release(ctx, l.now(), reqs) }), nil
}

// ErrLeaseNotHeld is returned by Lease.Release when the lease holds
// nothing: it was released already, or it expired.
var ErrLeaseNotHeld = errors.New("floodgate: the lease holds nothing: released already, or expired")

// Lease is what an allowed request holds under a concurrency limit, until
// its Release. Create one with Limiter.Acquire (rlsclient.Client.Acquire
// returns one too); it is safe for concurrent use.
type Lease struct {
	// Decision is the decision the request got.
	Decision Decision
	release  func(context.Context) error
	done     atomic.Bool
}

// NewLease returns a Lease of decision d whose Release calls release (nil:
// nothing to release). It is for limiters other than Limiter that hand out
// leases, so that they can stand where a Limiter stands behind the
// middleware that holds concurrency units (httplimit's and grpclimit's
// Acquire interfaces): rlsclient.Client is one, a program's own limiter
// may be another.
func NewLease(d Decision, release func(context.Context) error) *Lease {
	return &Lease{Decision: d, release: release}
}

// Release gives back what the lease holds. A rejected request's lease, and
// a lease of a limit that holds nothing, release nothing and return nil; a
// second Release returns ErrLeaseNotHeld and changes nothing. Release on a
// nil Lease returns nil.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil || !l.Decision.Allowed || l.release == nil {
		return nil
	}
	if l.done.Swap(true) {
		return ErrLeaseNotHeld
	}
	return l.release(ctx)
}

// now returns the limiter's time in Unix nanoseconds.
func (l *Limiter) now() int64 {
	if l.clock != nil {
		return l.clock().UnixNano()
	}
	// time.Since reads only the monotonic clock when start carries a
	// monotonic reading, which time.Now's result does.
	return l.unix0 + int64(time.Since(l.start))
}
