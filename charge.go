package floodgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/store"
)

// ErrChargeUnsupported is returned by Check, Charge and Settle when the
// limiter's store cannot count without deciding (it does not implement
// store.Syncer). The memory and Redis stores both can.
var ErrChargeUnsupported = errors.New("floodgate: the store cannot count without deciding (it is no store.Syncer)")

// ErrSettled is returned by Prepayment.Settle when the prepayment was
// already settled.
var ErrSettled = errors.New("floodgate: prepayment already settled")

// Check reports whether key has allowance left now (whether a request of
// cost 1 would be allowed) without counting anything. Use it before work
// whose cost is known only afterwards, and Charge the cost when it is.
// A key in debt (see Charge) is rejected, with RetryAfter saying when
// enough of the debt will have left the window.
//
// Some costs are known only once the work is done: the tokens a language
// model generated, the bytes a download sent. Check, Charge and Prepay
// limit such costs:
//
//	d, _ := lim.Check(ctx, tenant) // before the call: is anything left?
//	if !d.Allowed { reject }
//	used := callModel()
//	lim.Charge(ctx, tenant, used) // after: count what it really cost
//
// Charge counts even past the limit: a key that overspent is in debt, and
// Check rejects it until enough of what it spent has left the window to
// bring it under the limit again. So the promise becomes:
//
//   - Checks keep the busiest-window bound: no check is allowed while the
//     units counted in the last window reach the limit.
//   - Units counted in any window-long interval exceed the limit (with the
//     algorithm's tolerance) by at most the cost of the responses that were
//     in flight when the budget ran out: one response's cost for a client
//     that sends one request at a time, the sum of the largest responses for
//     concurrent ones. Prepaying an estimate (Prepay) shrinks that to the
//     amount by which responses exceed their estimates.
//   - Nothing is forgiven: every unit spent is counted, and a key in debt
//     gets nothing until its last window is under the limit again. So the
//     overspend is paid back within one window instead of accumulating;
//     it does not carry over to the next.
func (l *Limiter) Check(ctx context.Context, key string) (Decision, error) {
	return l.settle(ctx, key, 0)
}

// Charge counts n units for key now without deciding, even when they take
// the key past its limit: they are units already spent. The Decision
// returned describes the key after the charge (Allowed reports whether a
// further request of cost 1 would pass); it is not a verdict on the charge,
// which always counts. A cost below 1 counts nothing.
//
// The window algorithms (bounded-log, sliding-log, the fixed, sliding and
// weighted windows) keep the whole debt. The token bucket, GCRA and the
// leaky bucket keep at most one empty bucket of it per charge; a
// concurrency limiter counts the units as in flight until Release.
func (l *Limiter) Charge(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 {
		return l.settle(ctx, key, 0)
	}
	return l.settle(ctx, key, n)
}

// settle records n units (none if n is 0) through the store's Sync and
// returns a peek at the result.
func (l *Limiter) settle(ctx context.Context, key string, n int64) (Decision, error) {
	sy, ok := l.store.(store.Syncer)
	if !ok {
		return Decision{}, ErrChargeUnsupported
	}
	now := l.now()
	alg := l.cur.Load().alg
	b := []store.SyncBatch{{Algorithm: alg, Key: key}}
	if n > 0 {
		b[0].Events = []store.Event{{Time: now, Cost: n}}
	}
	if err := sy.Sync(ctx, now, b); err != nil {
		return Decision{}, err
	}
	state := b[0].State
	if len(state) < alg.Words() {
		state = make([]int64, alg.Words())
	}
	d := alg.Peek(state, now, 1)
	if d.Allowed {
		d.Remaining = min(d.Remaining+1, d.Limit) // the peeked unit is not taken
	}
	return d, nil
}

// Prepayment is an estimate counted before the cost of a request is known,
// settled with the real cost when it is. Create one with Prepay; it is
// safe for concurrent use, and settles at most once.
type Prepayment struct {
	lim      *Limiter
	key      string
	estimate int64
	settled  atomic.Bool
	// Decision is the decision Prepay made.
	Decision Decision
}

// Prepay decides a request of estimated cost for key and counts the
// estimate if it is allowed; an estimate of 0 counts nothing and only
// checks that allowance is left (Check). When the request is done, Settle
// the prepayment with what it really cost.
//
// The estimate bounds the overspend of concurrent requests: with an
// estimate at least as large as any real cost (a model's max_tokens), the
// limit holds exactly as for ordinary requests. The part of an estimate a
// request did not use stays counted: units once counted are never given
// back, so an estimate errs on the side of the limit.
//
// A rejected prepayment (Decision.Allowed false) needs no Settle.
//
// Unlike x/time/rate's Reserve, which books future allowance and can give
// it back with Cancel, Prepay counts now and never gives back.
func (l *Limiter) Prepay(ctx context.Context, key string, estimate int64) (*Prepayment, error) {
	if estimate < 0 {
		return nil, fmt.Errorf("floodgate: negative estimate %d", estimate)
	}
	r := &Prepayment{lim: l, key: key, estimate: estimate}
	var err error
	if estimate == 0 {
		r.Decision, err = l.Check(ctx, key)
	} else {
		r.Decision, err = l.AllowN(ctx, key, estimate)
	}
	if err != nil {
		return nil, err
	}
	if !r.Decision.Allowed {
		r.settled.Store(true)
	}
	return r, nil
}

// Settle counts what the request really cost beyond its estimate, even
// past the limit (see Charge), and returns the key's state after it. A cost
// at or below the estimate counts nothing more. A second Settle returns
// ErrSettled and counts nothing, so a retry cannot count twice.
func (r *Prepayment) Settle(ctx context.Context, actual int64) (Decision, error) {
	if r.settled.Swap(true) {
		return Decision{}, ErrSettled
	}
	return r.lim.Charge(ctx, r.key, actual-r.estimate)
}
