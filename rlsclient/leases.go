package rlsclient

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rlsclient/quotapb"
)

// Quota leases
//
// With Options.Leases, Allow and AllowN decide locally from leases taken
// from the server (floodgate.quota.v1.QuotaLeases, beside RLS on the same
// gRPC listener): a lease is a part of a key's remaining allowance, taken
// with one call, spent without a call, topped up in the background before
// it runs out, and given back when the key goes quiet (or on Close). The
// server sizes each lease: what the client asks for (about Horizon of its
// recent use) while the key is far from its limit, less and less near it,
// nothing at it; a key without a lease is decided by one RLS call per
// request, as without leases. The units a lease holds count for every
// decision on the key until they are reported spent or given back, so the
// rule's bound holds on the times requests were really allowed: leases add
// no overshoot. Only a rule with leases: true keeps them (docs/rules.md).
//
// When the server cannot be reached, a key keeps deciding on its lease until
// the lease expires (never later than the server stops holding it), and then
// applies the rule's failure policy (open: allow; closed: reject with
// algorithm.ReasonStoreUnavailable; local: allow up to the last grant per
// lease ttl), or Options.FailClosed for a key the server never answered.

// LeaseOptions configures quota leases (Options.Leases).
type LeaseOptions struct {
	// Horizon is how long a lease should last at the key's recent rate:
	// the client asks for that much of its use (default 1 s). Longer means
	// fewer calls and more units set aside.
	Horizon time.Duration
	// MinUnits is the least a key asks for (default 16).
	MinUnits int64
	// Idle is how long a key may go without a decision before its lease is
	// given back (default 2 s).
	Idle time.Duration
}

// Lease defaults.
const (
	DefaultLeaseHorizon = time.Second
	DefaultLeaseMin     = 16
	DefaultLeaseIdle    = 2 * time.Second
)

// expiryMargin is taken off each lease's ttl locally, so the client stops
// spending before the server stops holding, whatever the scheduling delays.
const expiryMargin = 20 * time.Millisecond

// leases is a Client's lease table and its background top-ups.
type leases struct {
	c    *Client
	o    LeaseOptions
	q    quotapb.QuotaLeasesClient
	base time.Time
	keys sync.Map // string -> *leaseKey
	due  chan *leaseKey
	stop chan struct{}
	done chan struct{}
}

// leaseKey is one key's lease.
type leaseKey struct {
	key string
	// units is the units left to spend (high 32 bits) and the units spent
	// since the last op was sent (low 32 bits), in one word so that a
	// decision and a report never see half of the other.
	units   atomic.Uint64
	expires atomic.Int64 // ns since base; 0: no lease
	lastUse atomic.Int64 // ns since base
	target  atomic.Int64 // units the lease is topped up towards
	retryAt atomic.Int64 // ns since base: when to ask for a lease again
	// queued is set while the key waits for a Lease call or is on one: one
	// op per lease at a time.
	queued atomic.Bool
	view   atomic.Pointer[leaseView]

	mu        sync.Mutex // the fields below
	id        string
	seq       uint64
	lastOp    int64 // ns since base of the last op sent
	failure   quotapb.Grant_Failure
	answered  bool   // the server answered an op for this key
	noLease   string // why the server keeps no lease for it ("": it does)
	lastGrant int64
}

// leaseView is what the server last said of a key, for local decisions.
type leaseView struct {
	limit, remaining int64
	reset            time.Duration
}

const half = 32

func pack(avail, spent int64) uint64 { return uint64(avail)<<half | uint64(spent) }
func unpack(w uint64) (avail, spent int64) {
	return int64(w >> half), int64(w & (1<<half - 1))
}

func newLeases(c *Client, o LeaseOptions) *leases {
	if o.Horizon <= 0 {
		o.Horizon = DefaultLeaseHorizon
	}
	if o.MinUnits <= 0 {
		o.MinUnits = DefaultLeaseMin
	}
	if o.Idle <= 0 {
		o.Idle = DefaultLeaseIdle
	}
	l := &leases{c: c, o: o, q: quotapb.NewQuotaLeasesClient(c.conn), base: time.Now(),
		due: make(chan *leaseKey, 4096), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *leases) now() int64 { return int64(time.Since(l.base)) }

// get returns key's lease entry, making it.
func (l *leases) get(key string) *leaseKey {
	if v, ok := l.keys.Load(key); ok {
		return v.(*leaseKey)
	}
	v, _ := l.keys.LoadOrStore(key, &leaseKey{key: key})
	return v.(*leaseKey)
}

// allow decides n units of key: locally while its lease has them, else by
// an RLS call (and a top-up is asked for in the background).
func (l *leases) allow(ctx context.Context, key string, n int64) (Decision, error) {
	lk := l.get(key)
	now := l.now()
	lk.lastUse.Store(now)
	if now < lk.expires.Load() {
		for {
			w := lk.units.Load()
			avail, spent := unpack(w)
			if avail < n {
				break
			}
			if lk.units.CompareAndSwap(w, pack(avail-n, spent+n)) {
				if 2*(avail-n) < lk.target.Load() {
					l.topUp(lk)
				}
				return lk.local(avail - n), nil
			}
		}
	}
	if now >= lk.retryAt.Load() {
		l.topUp(lk)
	}
	d, err := l.c.call(ctx, key, uint64(n))
	if err != nil {
		return l.failed(ctx, lk, n, err)
	}
	return d, nil
}

// local is the decision of units spent from the lease, left units after.
func (lk *leaseKey) local(left int64) Decision {
	d := Decision{Allowed: true, Remaining: left}
	if v := lk.view.Load(); v != nil {
		d.Limit, d.Remaining, d.ResetAfter = v.limit, v.remaining+left, v.reset
	}
	return d
}

// failed applies the failure policy to a call that could not be made: the
// rule's, as the server last told it, else the client's.
func (l *leases) failed(ctx context.Context, lk *leaseKey, n int64, err error) (Decision, error) {
	lk.mu.Lock()
	answered, policy, grant := lk.answered, lk.failure, lk.lastGrant
	lk.mu.Unlock()
	if !answered || errors.Is(err, ErrUnmatched) {
		return l.c.absorb(Decision{}, err)
	}
	d, aerr := l.c.absorbWith(err, policy == quotapb.Grant_CLOSED)
	if aerr != nil || policy != quotapb.Grant_LOCAL {
		return d, aerr
	}
	// local: allow up to the last grant per lease ttl, on a lease of our own.
	now := l.now()
	if lk.expires.Load() <= now {
		lk.expires.Store(now + int64(DefaultLeaseHorizon))
		lk.units.Store(pack(grant, 0))
	}
	for {
		w := lk.units.Load()
		avail, spent := unpack(w)
		if avail < n {
			return Decision{Reason: algorithm.ReasonStoreUnavailable}, nil
		}
		if lk.units.CompareAndSwap(w, pack(avail-n, spent)) {
			return Decision{Allowed: true}, nil
		}
	}
}

// topUp queues lk for the next Lease call, unless it is queued already.
func (l *leases) topUp(lk *leaseKey) {
	if lk.queued.Swap(true) {
		return
	}
	select {
	case l.due <- lk:
	default:
		lk.queued.Store(false) // full: a later decision asks again
	}
}

// run sends the queued top-ups, a batch per call, and gives back the
// leases of keys gone quiet.
func (l *leases) run() {
	defer close(l.done)
	tick := time.NewTicker(l.o.Idle / 2)
	defer tick.Stop()
	batch := make([]*leaseKey, 0, 256)
	for {
		select {
		case <-l.stop:
			return
		case lk := <-l.due:
			batch = append(batch[:0], lk)
		drain:
			for len(batch) < 1024 {
				select {
				case lk := <-l.due:
					batch = append(batch, lk)
				default:
					break drain
				}
			}
			l.send(batch, false)
		case <-tick.C:
			l.sweep()
		}
	}
}

// sweep gives back the leases of keys without a decision for Idle, and
// forgets keys quiet for longer.
func (l *leases) sweep() {
	now := l.now()
	var quiet []*leaseKey
	l.keys.Range(func(k, v any) bool {
		lk := v.(*leaseKey)
		idle := now - lk.lastUse.Load()
		if idle < int64(l.o.Idle) {
			return true
		}
		if lk.expires.Load() > now {
			if !lk.queued.Swap(true) {
				quiet = append(quiet, lk)
			}
		} else if idle > 4*int64(l.o.Idle) {
			l.keys.Delete(k)
		}
		return true
	})
	if len(quiet) > 0 {
		l.send(quiet, true)
	}
}

// send sends one Lease call: a top-up for each key of batch, or with
// giveBack its release, and applies the answers. Each key of batch is
// queued (its flag set): it is this call's until the answer is applied.
func (l *leases) send(batch []*leaseKey, giveBack bool) {
	req := &quotapb.LeaseRequest{Domain: l.c.o.Domain}
	sent := batch[:0:0]
	now := l.now()
	for _, lk := range batch {
		if op := l.op(lk, giveBack, now); op != nil {
			req.Ops = append(req.Ops, op)
			sent = append(sent, lk)
		} else {
			lk.queued.Store(false)
		}
	}
	if len(sent) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.o.Timeout)
	defer cancel()
	l.c.calls.Add(1)
	resp, err := l.q.Lease(ctx, req)
	if err == nil && len(resp.GetGrants()) != len(sent) {
		err = fmt.Errorf("rlsclient: %d grants for %d lease ops", len(resp.GetGrants()), len(sent))
	}
	for i, lk := range sent {
		if err != nil {
			// Applied or not, the lease keeps its units until it expires,
			// and the spent units go with the next op: if this one was
			// applied they are counted twice, never less.
			addSpent(lk, int64(req.Ops[i].Spent))
		} else {
			lk.mu.Lock()
			l.apply(lk, req.Ops[i], resp.Grants[i], now)
			lk.mu.Unlock()
		}
		lk.queued.Store(false)
	}
	if err != nil && l.c.o.OnError != nil {
		l.c.o.OnError(err)
	}
}

// op builds lk's next op (nil: nothing to send), taking the units spent
// since the last one.
func (l *leases) op(lk *leaseKey, giveBack bool, now int64) *quotapb.LeaseOp {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.expires.Load() <= now {
		// Over (or never taken): the server counts it in full.
		lk.id, lk.seq = "", 0
		lk.expires.Store(0)
		lk.units.Store(0)
		if giveBack {
			return nil
		}
	}
	var spent int64
	for {
		w := lk.units.Load()
		a, s := unpack(w)
		if lk.units.CompareAndSwap(w, pack(a, 0)) {
			spent = s
			break
		}
	}
	target := int64(0)
	if !giveBack {
		target = l.target(lk, spent, now)
		lk.target.Store(target)
	}
	lk.seq++
	lk.lastOp = now
	op := &quotapb.LeaseOp{Entries: entriesOf(l.c.describe(lk.key)), Lease: lk.id, Seq: lk.seq,
		Spent: uint64(spent), Target: uint64(target)}
	if lk.id == "" {
		op.Seq, op.Spent = 0, 0
	}
	return op
}

// addSpent adds n units back to lk's spent count.
func addSpent(lk *leaseKey, n int64) {
	for {
		w := lk.units.Load()
		a, s := unpack(w)
		if lk.units.CompareAndSwap(w, pack(a, s+n)) {
			return
		}
	}
}

// apply applies grant g, the answer to op sent at sent. lk.mu is held.
func (l *leases) apply(lk *leaseKey, op *quotapb.LeaseOp, g *quotapb.Grant, sent int64) {
	lk.answered = true
	lk.failure = g.GetOnFailure()
	lk.view.Store(&leaseView{limit: int64(g.GetLimit()), remaining: int64(g.GetRemaining()), reset: g.GetResetAfter().AsDuration()})
	lk.noLease = g.GetNoLease()
	if lk.noLease != "" {
		lk.retryAt.Store(sent + int64(l.o.Horizon)) // ask again later: rules change
	}
	if g.GetLease() == "" || g.GetTtl().AsDuration() <= expiryMargin {
		lk.id, lk.seq = "", 0
		lk.expires.Store(0)
		lk.units.Store(0)
		if op.GetTarget() > 0 && lk.noLease == "" {
			lk.retryAt.Store(sent + int64(l.o.Horizon)/4) // near the limit: per request for a while
		}
		return
	}
	if lk.id == "" {
		lk.id, lk.seq = g.GetLease(), 1
	}
	lk.lastGrant = max(int64(g.GetGranted()), lk.lastGrant/2)
	if g.GetRepeat() {
		for {
			w := lk.units.Load()
			_, s := unpack(w)
			if lk.units.CompareAndSwap(w, pack(max(int64(g.GetHeld())-s, 0), s)) {
				break
			}
		}
	} else {
		for {
			w := lk.units.Load()
			a, s := unpack(w)
			if lk.units.CompareAndSwap(w, pack(a+int64(g.GetGranted()), s)) {
				break
			}
		}
	}
	lk.expires.Store(sent + int64(g.GetTtl().AsDuration()-expiryMargin))
	if avail, _ := unpack(lk.units.Load()); avail == 0 {
		lk.retryAt.Store(sent + int64(l.o.Horizon)/4) // near the limit: per request for a while
	}
}

// target returns the units to ask lk's lease to hold: Horizon of its rate
// since the last op, doubled while leases run out faster than that.
func (l *leases) target(lk *leaseKey, spent, now int64) int64 {
	t := lk.target.Load()
	if lk.lastOp > 0 && now > lk.lastOp {
		rate := float64(spent) / float64(now-lk.lastOp) // units per ns
		t = max(t/2, int64(math.Ceil(rate*float64(l.o.Horizon))))
		if avail, _ := unpack(lk.units.Load()); avail == 0 {
			t = max(t, 2*lk.target.Load())
		}
	}
	return min(max(t, l.o.MinUnits), 1<<31)
}

// close stops the top-ups and gives every lease back.
func (l *leases) close() {
	close(l.stop)
	<-l.done
	var live []*leaseKey
	now := l.now()
	l.keys.Range(func(_, v any) bool {
		if lk := v.(*leaseKey); lk.expires.Load() > now && !lk.queued.Swap(true) {
			live = append(live, lk)
		}
		return true
	})
	if len(live) > 0 {
		l.send(live, true)
	}
}

// Calls returns how many calls the client has sent to the server: RLS
// calls and, with leases, Lease calls (top-ups and give-backs).
func (c *Client) Calls() int64 { return c.calls.Load() }

// entriesOf returns d as lease op entries.
func entriesOf(d Descriptor) []*quotapb.Entry {
	out := make([]*quotapb.Entry, len(d))
	for i, e := range d {
		out[i] = &quotapb.Entry{Key: []byte(e.Key), Value: []byte(e.Value)}
	}
	return out
}
