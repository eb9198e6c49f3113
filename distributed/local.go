package distributed

import (
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// how says what state a request is decided on locally.
type how uint8

const (
	howView     how = iota // the local view (delayed; fail-open)
	howSplitOwn            // the split arrangement's own state, no events
	howSplit               // the limit/Nodes share of the view (fail-local)
	howClosed              // reject: the store is unavailable (fail-closed)
)

func policyHow(p store.FailurePolicy) how {
	switch p {
	case store.FailClosed:
		return howClosed
	case store.FailLocal:
		return howSplit
	default:
		return howView
	}
}

// scratch is a request's working copy of the state it is decided on.
type scratch struct {
	e     *entry
	h     how
	state []int64
}

// decideLocal decides reqs on local state: each request is decided on the
// state howOf picks, all on copies; if every request that is not Shadow is
// allowed, the copies are kept and the allowed requests recorded as events
// to push, otherwise nothing changes.
func (n *Node) decideLocal(now int64, reqs []store.Request, out []algorithm.Decision, howOf func(*store.Request) how) error {
	if len(reqs) == 1 {
		return n.decideLocalOne(now, &reqs[0], &out[0], howOf)
	}
	defer n.lockShards(reqs)()
	return n.decideLocalAll(now, reqs, out, howOf)
}

// decideLocalOne is decideLocal for one request, the common path: one
// shard, no allocation beyond the state copy.
func (n *Node) decideLocalOne(now int64, r *store.Request, out *algorithm.Decision, howOf func(*store.Request) how) error {
	s := &n.table.shards[n.table.shardOf(r.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	h := howOf(r)
	if h == howClosed {
		*out = n.closedDecision(r)
		return nil
	}
	e := s.get(r.Algorithm, r.Key, true, now)
	st, alg, err := n.target(s, e, h, now)
	if err != nil {
		return err
	}
	var d algorithm.Decision
	if h == howSplit {
		d = alg.Decide(st, now, r.Cost) // the split state holds the charge
	} else {
		d = decideCharged(alg, st, e.charged(), now, r.Cost)
	}
	*out = d
	e.last = now
	if h == howView && n.arr == Delayed {
		s.noteNear(e, d, n.count())
	}
	if d.Allowed {
		n.commitEvent(s, e, h, now, r.Cost)
	} else if h != howSplitOwn {
		s.markDirty(e) // refresh the view of a key that rejects
	}
	return nil
}

// lockShards locks the shards of reqs' keys in ascending order and returns
// the function that unlocks them.
func (n *Node) lockShards(reqs []store.Request) (unlock func()) {
	var locked [numShards]bool
	for i := range reqs {
		locked[n.table.shardOf(reqs[i].Key)] = true
	}
	for i := range locked {
		if locked[i] {
			n.table.shards[i].mu.Lock()
		}
	}
	return func() {
		for i := range locked {
			if locked[i] {
				n.table.shards[i].mu.Unlock()
			}
		}
	}
}

// decideLocalAll is decideLocal for several requests, their shards locked:
// each is decided on a copy of its state, and the copies are kept only if
// every request that is not Shadow was allowed.
func (n *Node) decideLocalAll(now int64, reqs []store.Request, out []algorithm.Decision, howOf func(*store.Request) how) error {
	type copyKey struct {
		e     *entry
		split bool
	}
	work := make([]scratch, len(reqs))
	// One working copy per real state; a charged entry's copy holds its
	// charge too, so its state is given the allowed requests one by one.
	copies := make(map[copyKey][]int64, len(reqs))
	ok := true
	for i := range reqs {
		r := &reqs[i]
		h := howOf(r)
		if h == howClosed {
			out[i] = n.closedDecision(r)
			work[i].h = h
			if !r.Shadow {
				ok = false
			}
			continue
		}
		s := &n.table.shards[n.table.shardOf(r.Key)]
		e := s.get(r.Algorithm, r.Key, true, now)
		st, alg, err := n.target(s, e, h, now)
		if err != nil {
			return err
		}
		ck := copyKey{e, h == howSplit}
		cp, seen := copies[ck]
		if !seen {
			cp = append([]int64(nil), st...)
			if c := e.charged(); !ck.split && c > 0 {
				alg.Record(cp, now, c)
			}
			copies[ck] = cp
		}
		work[i] = scratch{e: e, h: h, state: cp}
		out[i] = alg.Decide(cp, now, r.Cost)
		e.last = now
		if h == howView && n.arr == Delayed {
			s.noteNear(e, out[i], n.count())
		}
		if !out[i].Allowed && !r.Shadow {
			ok = false
		}
	}
	if !ok {
		n.keepNone(reqs, out, work)
		return nil
	}
	for ck, cp := range copies {
		switch {
		case ck.split:
			copy(ck.e.split, cp)
		case ck.e.charged() == 0:
			copy(ck.e.state, cp)
		}
	}
	for i := range reqs {
		w := &work[i]
		if w.e == nil || !out[i].Allowed {
			continue
		}
		if w.h != howSplit && w.e.charged() > 0 {
			w.e.alg.Decide(w.e.state, now, reqs[i].Cost) // its copy held the charge
		}
		// The states were updated by copying the decided copies back;
		// record the event (and, for fail-local, the full view) here.
		n.commitEvent(&n.table.shards[n.table.shardOf(reqs[i].Key)], w.e, w.h, now, reqs[i].Cost)
	}
	return nil
}

// keepNone ends decideLocalAll when a request was rejected: no copy is
// kept, the decided keys are pulled at the next sync, and the requests
// allowed on their own report the allowance they did not take.
func (n *Node) keepNone(reqs []store.Request, out []algorithm.Decision, work []scratch) {
	for i := range reqs {
		if work[i].e != nil && work[i].h != howSplitOwn {
			n.table.shards[n.table.shardOf(reqs[i].Key)].markDirty(work[i].e)
		}
	}
	for i := range out {
		if out[i].Allowed {
			// Not counted after all: the allowance it took is still there.
			out[i].Remaining += reqs[i].Cost
		}
	}
}

// target returns the state and algorithm a request on e is decided on
// (for all but the split share, with e.charge still to count). The caller
// holds s, e's shard's lock.
func (n *Node) target(s *shard, e *entry, h how, now int64) ([]int64, algorithm.Algorithm, error) {
	switch h {
	case howSplit:
		if e.split == nil {
			// The count the node last saw: during an outage it does not
			// change.
			parts := n.count() * n.regions
			a, err := n.splitAlg(e.alg, parts)
			if err != nil {
				return nil, nil, err
			}
			n.ensureView(s, e, now)
			e.splitAlg = a
			e.split = make([]int64, a.Words())
			if u := used(e.alg, e.state, now) + e.charge; u > 0 {
				share := (u + int64(parts) - 1) / int64(parts)
				a.Record(e.split, now, share)
			}
		} else if _, ok := e.alg.(splitter); ok {
			// The request's own parameters, divided as the state was.
			a, err := n.splitAlg(e.alg, n.count())
			if err != nil {
				return nil, nil, err
			}
			e.splitAlg = a
		}
		return e.split, e.splitAlg, nil
	default:
		n.ensureView(s, e, now)
		return e.state, e.alg, nil
	}
}

// ensureView gives e a local view to decide on. For a centralized node it
// is built from the store's last decision on the key; otherwise it starts
// empty, charged what the eviction summary holds for the key. The caller
// holds s, e's shard's lock.
func (n *Node) ensureView(s *shard, e *entry, now int64) {
	if e.state != nil {
		return
	}
	e.ensureState()
	if e.haveView {
		if u := e.viewLimit - e.viewRemaining; u > 0 {
			e.alg.Record(e.state, e.viewAt, u)
		}
		return
	}
	n.table.charge(s, e, now)
}

// commitEvent records an allowed request decided on e's target state
// (already updated by Decide). The caller holds s's lock.
func (n *Node) commitEvent(s *shard, e *entry, h how, now, cost int64) {
	if h == howSplitOwn {
		return
	}
	if h == howSplit {
		e.alg.Record(e.state, now, cost) // keep the full view current too
	}
	n.enqueue(s, e, now, cost)
}

// closedDecision is a fail-closed rejection: retry once the breaker's
// cooldown has passed, when the node tries the store again.
func (n *Node) closedDecision(r *store.Request) algorithm.Decision {
	cfg := r.Algorithm.Config()
	return algorithm.Decision{Allowed: false, Limit: cfg.Limit, Reason: algorithm.ReasonStoreUnavailable, RetryAfter: n.br.cooldown}
}
