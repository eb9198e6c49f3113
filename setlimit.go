package floodgate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/memtable"
	"github.com/floodgate-dev/floodgate/store"
)

// limits is the limit a Limiter enforces, and the limits SetLimit
// replaced that still apply for a while.
type limits struct {
	alg algorithm.Algorithm
	// counter is the algorithm.Config.Counter the limiter gave alg, or
	// empty when its caller named one.
	counter string
	mem     *memtable.Bound // the memory store bound to alg; nil for other stores
	olds    []oldLimit      // nil once no replaced limit applies
}

// oldLimit is a limit SetLimit replaced: it still applies until until
// (Unix nanoseconds).
type oldLimit struct {
	alg   algorithm.Algorithm
	until int64
}

// bind builds the limits for limit, with no replaced limits. A limit that
// names no Counter is counted in counter, or, when that is empty too, in
// one named after the limit (limiterCounter).
func (l *Limiter) bind(limit Limit, counter string) (*limits, error) {
	own := limit.Counter == ""
	if own && counter == "" {
		alg, err := algorithm.New(limit)
		if err != nil {
			return nil, err
		}
		counter = limiterCounter(alg.Config())
	}
	if own {
		limit.Counter = counter
	}
	alg, err := algorithm.New(limit)
	if err != nil {
		return nil, err
	}
	c := &limits{alg: alg}
	if own {
		c.counter = counter
	}
	if t := memtable.Unwrap(l.store); t != nil {
		if c.mem, err = t.Bind(alg); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// SetLimit makes the limiter enforce limit from now on, and returns an
// error (changing nothing) if limit is not valid.
//
// When only the limit and the parameters derived from it change (the
// limit, capacity, rate, burst, tolerance or carry-over: the two limits
// have the same algorithm.Config.Identity) and the store keeps counts
// (store.CountKeeper: the memory store does), every key keeps its count:
// the store converts each key's state when it next sees it. A
// raised limit admits at once what it allows beyond what was counted; a
// lowered one applies at once to the count so far. docs/rules.md states
// the promise across the change.
//
// A change of window or algorithm (or of a sliding-log limit) counts
// something else, and another store keeps its counts per limit: under the
// new limit every key starts with a fresh count,
// and to keep the promise the limit it replaces still applies until its
// state would have gone idle (about one of its windows): until then a
// request must be allowed by both, and is counted by both.
//
// A concurrency limit cannot be changed (its units in flight would be
// forgotten): SetLimit from or to one is an error.
func (l *Limiter) SetLimit(limit Limit) error {
	l.setMu.Lock()
	defer l.setMu.Unlock()
	cur := l.cur.Load()
	if l.Limit() == limit {
		return nil
	}
	next, err := l.bind(limit, cur.counter)
	if err != nil {
		return err
	}
	if cur.alg.Config() == next.alg.Config() {
		return nil // limit differed only by defaults
	}
	if cur.alg.Name() == algorithm.Concurrency || next.alg.Name() == algorithm.Concurrency {
		return errors.New("floodgate: SetLimit cannot change a concurrency limit: its units in flight would be forgotten; make a new Limiter")
	}
	if keeper, ok := l.store.(store.CountKeeper); ok && keeper.KeepsCounts(next.alg) &&
		cur.alg.Config().Identity() == next.alg.Config().Identity() {
		// The stores convert each key's state; the limits replaced before
		// that still apply keep doing so.
		next.olds = cur.olds
		l.cur.Store(next)
		return nil
	}
	now := l.now()
	for _, o := range cur.olds {
		if o.until > now && o.alg.Config() != next.alg.Config() {
			next.olds = append(next.olds, o)
		}
	}
	if idle := cur.alg.IdleAfter(); idle > 0 {
		next.olds = append(next.olds, oldLimit{alg: cur.alg, until: now + int64(idle)})
	}
	l.cur.Store(next)
	return nil
}

// allowChanging decides a request while limits replaced by SetLimit still
// apply: in one store call, allowed only if every limit allows it. Once
// none applies any more it drops them, and decisions take the fast path
// again.
func (l *Limiter) allowChanging(ctx context.Context, c *limits, key string, n int64) (Decision, error) {
	now := l.now()
	reqs := make([]store.Request, 1, 1+len(c.olds))
	reqs[0] = store.Request{Algorithm: c.alg, Key: key, Cost: n}
	for _, o := range c.olds {
		if o.until > now {
			reqs = append(reqs, store.Request{Algorithm: o.alg, Key: key, Cost: n})
		}
	}
	if len(reqs) == 1 {
		l.cur.CompareAndSwap(c, &limits{alg: c.alg, counter: c.counter, mem: c.mem})
		return l.AllowN(ctx, key, n)
	}
	out := make([]Decision, len(reqs))
	if err := l.store.Decide(ctx, now, reqs, out); err != nil {
		return Decision{}, err
	}
	d := out[0]
	for _, o := range out[1:] {
		switch {
		case d.Allowed && !o.Allowed:
			d = o
		case !d.Allowed && !o.Allowed:
			d.RetryAfter = max(d.RetryAfter, o.RetryAfter)
		case d.Allowed && o.Allowed:
			d.Remaining = min(d.Remaining, o.Remaining)
			d.Delay = max(d.Delay, o.Delay)
		}
	}
	return d, nil
}

// ErrResetUnsupported is returned by Limiter.Reset when the limiter's store
// cannot forget a key (it is no store.Resetter).
var ErrResetUnsupported = errors.New("floodgate: the limiter's store cannot reset a key")

// Reset forgets key's count under the limiter's limit (and under limits
// SetLimit replaced that still apply), so that its next request starts
// with the whole allowance, as redis_rate's Reset does. The memory and
// Redis stores can; other stores return ErrResetUnsupported.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	rs, ok := l.store.(store.Resetter)
	if !ok {
		return ErrResetUnsupported
	}
	c := l.cur.Load()
	if err := rs.Reset(ctx, c.alg, key); err != nil {
		return fmt.Errorf("floodgate: Reset: %w", err)
	}
	for _, o := range c.olds {
		if err := rs.Reset(ctx, o.alg, key); err != nil {
			return fmt.Errorf("floodgate: Reset: %w", err)
		}
	}
	return nil
}

// limiterCounter names the counter of a Limiter made with the checked
// limit c (algorithm.Config.Counter): limiters made with equal limits that
// share a store share their keys' counters, and keep sharing them across
// SetLimit; limiters made with different limits count apart.
func limiterCounter(c algorithm.Config) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%#v", c)
	return fmt.Sprintf("limiter:%016x", h.Sum64())
}
