package rules

import (
	"context"
	"errors"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Quota leases
//
// A rule with leases: true lets clients take parts of a key's allowance
// and decide for themselves until they run out (package rlsclient's
// leases, the server's RLQS service): Engine.Hold takes, tops up and gives
// back such a lease, and decides the request's hits in the same step. The
// units a lease holds count for every decision on the key until the holder
// reports them spent or gives them back (algorithm.New with Config.Holds says why the
// algorithm's bound then holds on the times units were really spent).

// Why a request gets no quota lease (Result.NoLease).
const (
	noLeaseUnmatched = "no rule limits the request"
	noLeaseRule      = "the rule that limits it has no leases: true (or is in shadow mode, a quota, or takes its cost from the rule)"
	noLeaseSeveral   = "more than one rule limits it: leases are kept for requests that one rule limits"
	noLeaseStore     = "the counter store keeps no holds"
	noLeaseMode      = "the request is a peek or a charge"
)

// Hold applies op to the quota lease of req's key and decides need units
// of it (0: none; req.Hits is ignored) in one store call, when exactly one
// limited rule with leases applies to req (any other rule that applies must
// be unlimited) and the store is a store.Holder; it returns the decision as
// Check reports it (a need of 0: allowed, describing the rule) and what the
// lease holds. Otherwise Result.NoLease says why, nothing is held, and need
// units are decided with Check (0: nothing). An error means the request is
// malformed or the store could not be reached.
func (e *Engine) Hold(ctx context.Context, req Request, need int64, op lease.Op) (Result, lease.Held, error) {
	req.Hits = max(need, 1)
	set := e.set.Load()
	apps, err := set.resolve(req, nil)
	if err != nil {
		return Result{}, lease.Held{}, err
	}
	why, at := leasable(apps)
	if why == "" && (req.Peek || apps[at].r.late) {
		why = noLeaseMode
	}
	hs, ok := e.store.(store.Holder)
	if why == "" && !ok {
		why = noLeaseStore
	}
	if why != "" {
		return e.holdless(ctx, req, need, apps, why)
	}
	a := &apps[at]
	sr := store.Request{Algorithm: a.lim.alg, Key: a.key, Cost: need, OnFailure: a.r.failure}
	now := e.clock().UnixNano()
	d, held, err := hs.Hold(ctx, now, sr, op)
	if errors.Is(err, store.ErrNoHolds) {
		return e.holdless(ctx, req, need, apps, noLeaseStore)
	}
	if err != nil {
		return Result{}, lease.Held{}, err
	}
	decisions := make([]algorithm.Decision, len(apps))
	decisions[at] = d
	res := e.result(apps, decisions, now)
	warn(apps, &res, func(i int) int64 {
		if i == at && d.Allowed {
			return need
		}
		return 0
	})
	return res, held, nil
}

// holdless answers a request that gets no lease: Check decides its need;
// with no need, the result only describes the rules that apply
// (unlimited, blocked, or limited and undecided).
func (e *Engine) holdless(ctx context.Context, req Request, need int64, apps []applied, why string) (Result, lease.Held, error) {
	var res Result
	switch {
	case need > 0:
		var err error
		if res, err = e.Check(ctx, req); err != nil {
			return res, lease.Held{}, err
		}
	case len(apps) == 0:
		res = Result{Allowed: true, Tightest: -1}
		res.Domain, res.Unmatched = e.set.Load().unmatched(req.Domain)
	default:
		decisions := make([]algorithm.Decision, len(apps))
		for i := range apps {
			decisions[i] = algorithm.Decision{Allowed: true, Limit: apps[i].lim.limit}
		}
		res = e.result(apps, decisions, e.clock().UnixNano())
	}
	res.NoLease = why
	return res, lease.Held{}, nil
}

// leasable returns "" and the index of the one limited rule of apps when
// it keeps holds and every other rule is unlimited; else why not.
func leasable(apps []applied) (why string, at int) {
	at = -1
	for i := range apps {
		a := &apps[i]
		if a.lim.unlimited {
			continue
		}
		if at >= 0 {
			return noLeaseSeveral, -1
		}
		at = i
	}
	if at < 0 {
		return noLeaseUnmatched, -1
	}
	a := &apps[at]
	if _, ok := a.lim.alg.(store.HoldAlgorithm); !ok || a.lim.block || a.costErr != "" || a.r.shadow || a.r.quota ||
		a.r.cost.from != "" || a.r.cost.fixed > 0 {
		return noLeaseRule, -1
	}
	return "", at
}
