package distributed

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

func checkReqs(reqs []store.Request, out []algorithm.Decision) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("distributed: %d requests but %d decision slots: %w", len(reqs), len(out), store.ErrOutLength)
	}
	for i := range reqs {
		if reqs[i].Algorithm == nil {
			return fmt.Errorf("distributed: request %d: %w", i, store.ErrNoAlgorithm)
		}
	}
	return nil
}

// DecideOne implements store.Store.
func (n *Node) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	var out [1]algorithm.Decision
	reqs := [1]store.Request{req}
	err := n.Decide(ctx, now, reqs[:], out[:])
	return out[0], err
}

// Decide implements store.Store. Apart from a request without an algorithm
// or a context that ended, it returns no error: when the shared store fails,
// each request's failure policy decides.
func (n *Node) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	if err := checkReqs(reqs, out); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	switch n.arr {
	case Split:
		return n.decideSplit(now, reqs, out)
	case Delayed:
		down := n.br.isOpen()
		howOf := func(r *store.Request) how {
			if down {
				return policyHow(r.OnFailure)
			}
			return howView
		}
		if err := n.decideLocal(now, reqs, out, howOf); err != nil || down {
			return err
		}
		if allAllowed(reqs, out) || !n.settleRejected(ctx, now, reqs, out) {
			return nil
		}
		// A read settled a charge that alone rejected: decide again.
		return n.decideLocal(now, reqs, out, howOf)
	default:
		return n.decideCentral(ctx, now, reqs, out)
	}
}

// Release implements store.Store. Centralized nodes release in the shared
// store (an unreachable store leaves the units taken until they expire);
// split and delayed nodes release in their local state only, so the
// concurrency algorithm belongs in the centralized arrangement.
func (n *Node) Release(ctx context.Context, now int64, reqs []store.Request) error {
	for i := range reqs {
		if reqs[i].Algorithm == nil {
			return fmt.Errorf("distributed: request %d: %w", i, store.ErrNoAlgorithm)
		}
	}
	if n.arr == Centralized {
		if !n.br.allow(n.clock()) {
			return fmt.Errorf("distributed: release not sent: %w", ErrBreakerOpen)
		}
		rs := append([]store.Request(nil), reqs...) // the call may outlive its deadline
		err := n.timedCall(ctx, func(c context.Context) error { return n.shared.Release(c, now, rs) })
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, errMissed) {
				n.br.abandon() // the probe's slot, if this call was the probe
				return fmt.Errorf("distributed: release: %w", err)
			}
			return n.storeError(ctx, err, "release")
		}
		n.storeOK()
		return nil
	}
	for _, r := range reqs {
		alg := r.Algorithm
		if n.arr == Split {
			var err error
			if alg, err = n.ownShare(alg, now); err != nil {
				return err
			}
		}
		s := &n.table.shards[n.table.shardOf(r.Key)]
		s.mu.Lock()
		if e := s.get(alg, r.Key, false, now); e != nil && e.state != nil {
			alg.Release(e.state, now, r.Cost)
		}
		s.mu.Unlock()
	}
	return nil
}

// pick returns the requests of reqs at idx.
func pick(reqs []store.Request, idx []int) []store.Request {
	rs := make([]store.Request, len(idx))
	for j, i := range idx {
		rs[j] = reqs[i]
	}
	return rs
}

// allAllowed reports whether every request of reqs that is not Shadow was
// allowed.
func allAllowed(reqs []store.Request, out []algorithm.Decision) bool {
	for i := range reqs {
		if !out[i].Allowed && !reqs[i].Shadow {
			return false
		}
	}
	return true
}

// decideHere decides reqs on a split or delayed node's local state, as
// Decide does; unless count is set, nothing is counted (a closed request
// decided after them makes the decision keep nothing).
func (n *Node) decideHere(now int64, reqs []store.Request, out []algorithm.Decision, count bool) error {
	rs := reqs
	var howOf func(*store.Request) how
	if n.arr == Split {
		rs = append([]store.Request(nil), reqs...)
		for i := range rs {
			a, err := n.ownShare(rs[i].Algorithm, now)
			if err != nil {
				return err
			}
			rs[i].Algorithm = a
		}
		howOf = func(*store.Request) how { return howSplitOwn }
	} else {
		down := n.br.isOpen()
		howOf = func(r *store.Request) how {
			if down {
				return policyHow(r.OnFailure)
			}
			return howView
		}
	}
	if count {
		return n.decideLocal(now, rs, out, howOf)
	}
	all := append(append(make([]store.Request, 0, len(rs)+1), rs...), rs[0])
	all[len(rs)].Shadow = false
	closed := &all[len(rs)]
	tmp := make([]algorithm.Decision, len(all))
	err := n.decideLocal(now, all, tmp, func(r *store.Request) how {
		if r == closed {
			return howClosed
		}
		return howOf(r)
	})
	copy(out, tmp)
	return err
}
