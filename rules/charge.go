package rules

import (
	"context"
	"errors"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Costs known after the response
//
// A rule with charge_after_response: true is a budget whose cost is known
// only once the response is done (the tokens a language model used). It
// follows the two calls Envoy's AI gateway makes for such budgets: before
// the request, a check that counts nothing (Request.Peek; over RLS, a
// descriptor hits_addend of 0), which rejects while the budget is spent;
// after the response, the same descriptors with the real cost, which such
// a rule counts without deciding, even past its limit, and never rejects.
// A key that overspent is then in debt: checks reject it until the units
// that took it over have left the window.

// ErrChargeUnsupported is returned when a peek or a charge reaches an
// engine whose counter store cannot count without deciding (it is no
// store.Syncer) and no WithCharger store was given.
var ErrChargeUnsupported = errors.New("rules: the counter store cannot count without deciding; give the engine a store.Syncer with WithCharger")

// WithCharger sends peeks and charges to s when the engine's store is not
// a store.Syncer itself (a distributed node in front of Redis: s is then
// the Redis store). Charges go straight to s; a node that keeps local
// counts sees them at its next sync.
func WithCharger(s store.Syncer) EngineOption { return func(e *Engine) { e.charger = s } }

// Charge counts req's cost on every rule that applies, without deciding and
// even past the limits: the cost of a response already served. Concurrency
// rules are not charged (Release gives their units back). Each Status
// reports its rule after the charge, with Allowed true (a charge is never
// refused) and Remaining what is left; Result.Allowed is true.
func (e *Engine) Charge(ctx context.Context, req Request) (Result, error) {
	set := e.set.Load()
	apps, err := set.resolve(req, nil)
	if err != nil || len(apps) == 0 {
		return Result{Allowed: true, Tightest: -1}, err
	}
	return e.settle(ctx, apps, settleAll)
}

// lateCharged reports whether a rule in apps is charged after the response.
func lateCharged(apps []applied) bool {
	for i := range apps {
		if apps[i].r.late {
			return true
		}
	}
	return false
}

// checkLate is Check for a Peek request or one that a late rule applies
// to: late rules are charged, the others decided as usual.
func (e *Engine) checkLate(ctx context.Context, req Request, apps []applied) (Result, error) {
	if req.Peek {
		return e.settle(ctx, apps, settlePeek)
	}
	return e.settle(ctx, apps, settleLate)
}

type settleMode uint8

const (
	settlePeek settleMode = iota // count nothing, report what is left
	settleLate                   // charge late rules, decide the others
	settleAll                    // charge every rule but concurrency ones
)

// settle decides or charges every limited rule of apps as mode says, with
// one Decide for the decided rules and one Sync for the others.
func (e *Engine) settle(ctx context.Context, apps []applied, mode settleMode) (Result, error) {
	decisions := make([]algorithm.Decision, len(apps))
	var reqs []store.Request
	var batches []store.SyncBatch
	var ridx, bidx []int
	now := e.clock().UnixNano()
	for i := range apps {
		a := &apps[i]
		if a.lim.unlimited || a.lim.block || a.costErr != "" {
			continue // result describes them
		}
		conc := a.lim.alg.Name() == algorithm.Concurrency
		switch {
		case mode == settlePeek:
			batches = append(batches, store.SyncBatch{Algorithm: a.lim.alg, Key: a.key})
		case mode == settleAll && conc:
			decisions[i] = algorithm.Decision{Allowed: true, Limit: a.lim.limit}
			continue
		case mode == settleAll || a.r.late:
			batches = append(batches, store.SyncBatch{Algorithm: a.lim.alg, Key: a.key,
				Events: []store.Event{{Time: now, Cost: a.cost}}})
		default:
			reqs = append(reqs, store.Request{Algorithm: a.lim.alg, Key: a.key, Cost: a.cost,
				Shadow: e.shadow || a.r.shadow, OnFailure: a.r.failure})
			ridx = append(ridx, i)
			continue
		}
		bidx = append(bidx, i)
	}
	if len(reqs) > 0 {
		out := make([]algorithm.Decision, len(reqs))
		if err := e.store.Decide(ctx, now, reqs, out); err != nil {
			return Result{Allowed: true, Tightest: -1}, err
		}
		for k, d := range out {
			decisions[ridx[k]] = d
		}
	}
	if len(batches) > 0 {
		sy := e.charger
		if sy == nil {
			var ok bool
			if sy, ok = e.store.(store.Syncer); !ok {
				return Result{Allowed: true, Tightest: -1}, ErrChargeUnsupported
			}
		}
		if err := sy.Sync(ctx, now, batches); err != nil {
			return Result{Allowed: true, Tightest: -1}, err
		}
		for k, b := range batches {
			a := &apps[bidx[k]]
			state := b.State
			if len(state) < a.lim.alg.Words() {
				state = make([]int64, a.lim.alg.Words())
			}
			d := a.lim.alg.Peek(state, now, 1)
			if d.Allowed {
				d.Remaining = min(d.Remaining+1, d.Limit) // the peeked unit is not taken
			}
			if mode != settlePeek { // a charge is never refused
				d.Allowed, d.Reason, d.RetryAfter = true, "", 0
			}
			decisions[bidx[k]] = d
		}
	}
	res := e.result(apps, decisions, now)
	for k, b := range batches {
		a := &apps[bidx[k]]
		if u, ok := a.lim.alg.(interface{ Used([]int64, int64) int64 }); ok && len(b.State) >= a.lim.alg.Words() {
			res.Statuses[bidx[k]].Used = u.Used(b.State, now)
		}
	}
	warn(apps, &res, countedBySettle(apps, &res, mode))
	return res, nil
}
