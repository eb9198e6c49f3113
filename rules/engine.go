package rules

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

// Engine decides requests against the current rule set. It is safe for
// concurrent use; the rule set can be swapped while requests are checked.
type Engine struct {
	set    atomic.Pointer[Set]
	store  store.Store
	clock  func() time.Time
	shadow bool
	// charger takes peeks and charges when store is no store.Syncer.
	charger store.Syncer
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// WithClock makes the engine read time from now instead of time.Now; the
// simulator uses it to run the real engine under a virtual clock.
func WithClock(now func() time.Time) EngineOption { return func(e *Engine) { e.clock = now } }

// WithGlobalShadow puts every rule in shadow mode when on: requests are
// decided and counted, rejections are reported, and nothing is rejected.
// A rule file can also turn shadow mode on for all its rules (shadow: true).
func WithGlobalShadow(on bool) EngineOption { return func(e *Engine) { e.shadow = on } }

// NewEngine returns an engine that decides with set and keeps counters in st.
// A nil set is an empty one; a nil st is a new in-memory store.
func NewEngine(set *Set, st store.Store, opts ...EngineOption) *Engine {
	if st == nil {
		st = memstore.New(memstore.Options{})
	}
	e := &Engine{store: st, clock: time.Now}
	for _, o := range opts {
		o(e)
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	if set == nil {
		set = &Set{format: formatFloodgate}
	}
	e.set.Store(set)
	return e
}

// Set returns the rule set in force.
func (e *Engine) Set() *Set { return e.set.Load() }

// Swap puts s in force for the requests checked from now on; requests
// already being checked finish with the set they started with. Counters of
// rules whose name, counted entries and algorithm parameters did not change
// carry over. A nil s is ignored.
func (e *Engine) Swap(s *Set) {
	if s != nil {
		e.set.Store(s)
	}
}

// scratch holds the per-call slices, reused through a pool.
type scratch struct {
	apps []applied
	reqs []store.Request
	idx  []int // reqs[i] belongs to apps[idx[i]]
	out  []algorithm.Decision
	dec  []algorithm.Decision // one per apps
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Check decides req against every rule that applies to it, in one store
// call: the request passes only if every rule that is not in shadow mode
// passes, and if it does not pass, no rule counts it. An error means the
// request is malformed (see the Max bounds) or the store could not decide.
func (e *Engine) Check(ctx context.Context, req Request) (Result, error) {
	res := Result{Allowed: true, Tightest: -1}
	set := e.set.Load()
	sc := scratchPool.Get().(*scratch)
	defer func() {
		clear(sc.apps)
		clear(sc.reqs)
		sc.apps, sc.reqs, sc.idx, sc.out, sc.dec = sc.apps[:0], sc.reqs[:0], sc.idx[:0], sc.out[:0], sc.dec[:0]
		scratchPool.Put(sc)
	}()
	apps, err := set.resolve(req, sc.apps[:0])
	sc.apps = apps
	if err != nil {
		return res, err
	}
	if len(apps) == 0 {
		res.Domain, res.Unmatched = set.unmatched(req.Domain)
		return res, nil
	}
	if req.Peek || lateCharged(apps) {
		return e.checkLate(ctx, req, apps) // charge.go
	}
	shadowAll := e.shadow
	for i := range apps {
		a := &apps[i]
		if a.lim.unlimited {
			continue
		}
		c := a.cost
		if a.lim.block || a.costErr != "" {
			c = a.lim.reject
		}
		sc.reqs = append(sc.reqs, store.Request{
			Algorithm: a.lim.alg,
			Key:       a.key,
			Cost:      c,
			Shadow:    shadowAll || a.r.shadow || a.r.quota,
			OnFailure: a.r.failure,
		})
		sc.idx = append(sc.idx, i)
	}
	if cap(sc.dec) < len(apps) {
		sc.dec = make([]algorithm.Decision, len(apps))
	}
	decisions := sc.dec[:len(apps)]
	clear(decisions)
	now := e.clock().UnixNano()
	id, err := e.decide(ctx, now, sc, decisions)
	if err != nil {
		return res, err
	}
	res = e.result(apps, decisions, now)
	warn(apps, &res, countedByCheck(apps, &res))
	if res.Allowed && id != (lease.ID{}) {
		res.Lease = id.String()
	}
	return res, nil
}

// decide decides sc.reqs in one store call, writing the decisions into
// decisions by sc.idx, under a lease when concurrency rules are among them
// (see acquire), which it returns.
func (e *Engine) decide(ctx context.Context, now int64, sc *scratch, decisions []algorithm.Decision) (lease.ID, error) {
	if len(sc.reqs) == 0 {
		return lease.ID{}, nil
	}
	id, err := e.acquire(ctx, now, sc, decisions)
	if err != nil || id != (lease.ID{}) {
		return id, err
	}
	if len(sc.reqs) == 1 {
		d, err := e.store.DecideOne(ctx, now, sc.reqs[0])
		if err != nil {
			return id, err
		}
		decisions[sc.idx[0]] = d
		return id, nil
	}
	if cap(sc.out) < len(sc.reqs) {
		sc.out = make([]algorithm.Decision, len(sc.reqs))
	}
	out := sc.out[:len(sc.reqs)]
	if err := e.store.Decide(ctx, now, sc.reqs, out); err != nil {
		return id, err
	}
	for j, d := range out {
		decisions[sc.idx[j]] = d
	}
	return id, nil
}

// acquire decides sc.reqs under a new lease, when a concurrency rule is
// among them and the store holds leases, writing the decisions into
// decisions by sc.idx; it returns the lease, or the zero lease.ID when the
// requests are still to be decided.
func (e *Engine) acquire(ctx context.Context, now int64, sc *scratch, decisions []algorithm.Decision) (lease.ID, error) {
	ls, ok := e.store.(store.Leaser)
	if !ok || !leasing(sc.reqs) {
		return lease.ID{}, nil
	}
	if cap(sc.out) < len(sc.reqs) {
		sc.out = make([]algorithm.Decision, len(sc.reqs))
	}
	out := sc.out[:len(sc.reqs)]
	id := lease.New()
	switch err := ls.Acquire(ctx, now, id, sc.reqs, out); {
	case errors.Is(err, store.ErrNoLeases):
		return lease.ID{}, nil
	case err != nil:
		return lease.ID{}, err
	}
	for j, d := range out {
		decisions[sc.idx[j]] = d
	}
	return id, nil
}

// leasing reports whether any of reqs is decided by an algorithm that
// holds leases.
func leasing(reqs []store.Request) bool {
	for i := range reqs {
		if _, ok := reqs[i].Algorithm.(algorithm.Leaser); ok {
			return true
		}
	}
	return false
}

// result builds the Result of apps from their decisions (one per app;
// unlimited and blocking rules' are ignored), made at now.
func (e *Engine) result(apps []applied, decisions []algorithm.Decision, now int64) Result {
	res := Result{Allowed: true, Tightest: -1}
	shadowAll := e.shadow
	res.Statuses = make([]Status, len(apps))
	limited, quotas, quotasOver := 0, 0, 0
	for i := range apps {
		a := &apps[i]
		st := Status{
			Rule:       a.r.name,
			LimitName:  a.r.reportedName(),
			Quota:      a.r.quota && !a.lim.unlimited,
			Descriptor: a.desc,
			Key:        a.key,
			Limit:      a.lim.limit,
			Window:     a.lim.window,
			Unlimited:  a.lim.unlimited,
			Shadow:     shadowAll || a.r.shadow,
			Decision:   decisions[i],
			Failure:    a.r.failure,
		}
		switch {
		case a.lim.unlimited:
			st.Limit, st.Window = 0, 0
			st.Decision = algorithm.Decision{Allowed: true, Remaining: maxLimit}
		case a.lim.block:
			st.Algorithm = a.lim.algName
			st.Limit = 0
			st.Decision = algorithm.Decision{Reason: algorithm.ReasonBlocked,
				ResetAfter: a.lim.window, RetryAfter: a.lim.window}
		default:
			limited++
			st.Algorithm = a.lim.alg.Name()
			st.Used = max(0, max(st.Decision.Limit, 0)-st.Decision.Remaining)
			st.WarnAt = float64(a.r.warnPPM) / 1e6
			if p, ok := a.lim.alg.(interface{ Period(int64) (int64, int64) }); ok {
				// A calendar rule's window is the period it is in now.
				start, end := p.Period(now)
				st.Window, st.Calendar = time.Duration(end-start), a.lim.calendar()
				st.PeriodEnd = time.Unix(0, end)
			} else if st.Algorithm == algorithm.FixedWindow && st.Decision.ResetAfter > 0 {
				st.PeriodEnd = time.Unix(0, now+int64(st.Decision.ResetAfter))
			}
			if a.costErr != "" {
				st.Decision.Allowed = false
				st.Decision.Reason = algorithm.ReasonBadCost
				st.Detail = a.costErr
			}
		}
		if st.Quota && !st.Shadow {
			quotas++
		}
		if !st.Decision.Allowed {
			switch {
			case st.Shadow:
			case st.Quota:
				quotasOver++
			default:
				res.Allowed = false
			}
			if !contains(res.Rejected, st.Rule) {
				res.Rejected = append(res.Rejected, st.Rule)
			}
		}
		res.Statuses[i] = st
	}
	if quotas > 0 && quotasOver == quotas {
		res.Allowed = false
	}
	res.Unlimited = limited == 0 && !anyBlock(apps)
	res.Tightest = tightest(res.Statuses)
	return res
}

func anyBlock(apps []applied) bool {
	for i := range apps {
		if apps[i].lim.block {
			return true
		}
	}
	return false
}

// tightest picks the most restrictive status: among rejecting ones the
// longest RetryAfter, else the least remaining relative to the limit.
// Shadow statuses are considered only if all statuses are shadow.
func tightest(sts []Status) int {
	allShadow := true
	for i := range sts {
		if !sts[i].Shadow && !sts[i].Unlimited {
			allShadow = false
			break
		}
	}
	best := -1
	better := func(i, j int) bool { // is i tighter than j
		a, b := &sts[i].Decision, &sts[j].Decision
		if a.Allowed != b.Allowed {
			return !a.Allowed
		}
		if !a.Allowed {
			return a.RetryAfter > b.RetryAfter
		}
		// a.Remaining/a.Limit < b.Remaining/b.Limit, without division.
		la, lb := max(a.Limit, 1), max(b.Limit, 1)
		return mulLess(a.Remaining, lb, b.Remaining, la)
	}
	for i := range sts {
		if sts[i].Unlimited || (sts[i].Shadow && !allShadow) {
			continue
		}
		if best < 0 || better(i, best) {
			best = i
		}
	}
	return best
}

// mulLess reports a*b < c*d for non-negative values without overflow: it
// compares in float64 when the products could overflow.
func mulLess(a, b, c, d int64) bool {
	if a < 1<<31 && b < 1<<31 && c < 1<<31 && d < 1<<31 {
		return a*b < c*d
	}
	return float64(a)*float64(b) < float64(c)*float64(d)
}

// Tighter reports whether status a is more restrictive than b: a rejection
// before an acceptance, then the longer RetryAfter, then the less remaining
// allowance relative to Limit. It ignores Shadow and Unlimited, which each
// caller weighs its own way.
func (a *Status) Tighter(b *Status) bool {
	if a.Decision.Allowed != b.Decision.Allowed {
		return !a.Decision.Allowed
	}
	if !a.Decision.Allowed {
		return a.Decision.RetryAfter > b.Decision.RetryAfter
	}
	// a.Remaining/a.Limit < b.Remaining/b.Limit, without division.
	return mulLess(a.Decision.Remaining, max(1, b.Limit), b.Decision.Remaining, max(1, a.Limit))
}

// Release gives back what leaseText holds under the concurrency rules req
// matches, when the request ends: leaseText is the Result.Lease of the Check
// of req that allowed it. It reports whether anything was released; a
// lease never given for req's keys, released already or expired changes
// nothing and reports false. A lease that is not one Check could have
// returned is ErrInvalidRequest.
func (e *Engine) Release(ctx context.Context, req Request, leaseText string) (bool, error) {
	id, err := lease.Parse(leaseText)
	if err != nil {
		return false, fmt.Errorf("%w: lease %q: %v", ErrInvalidRequest, clip(leaseText), err)
	}
	set := e.set.Load()
	apps, err := set.resolve(req, nil)
	if err != nil {
		return false, err
	}
	var reqs []store.Request
	for _, a := range apps {
		if a.lim.unlimited || a.lim.block || a.costErr != "" || a.lim.alg.Name() != algorithm.Concurrency {
			continue
		}
		reqs = append(reqs, store.Request{Algorithm: a.lim.alg, Key: a.key, Cost: a.cost, OnFailure: a.r.failure})
	}
	if len(reqs) == 0 {
		return false, nil
	}
	ls, ok := e.store.(store.Leaser)
	if !ok {
		return false, store.ErrNoLeases
	}
	return ls.ReleaseLease(ctx, e.clock().UnixNano(), id, reqs)
}
