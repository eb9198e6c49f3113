package distributed

import (
	"context"
	"fmt"
	"sync"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Acquire implements store.Leaser, when the shared store holds leases. A
// centralized node decides every request in the shared store. Split and
// delayed nodes decide the concurrency requests there too, under the
// lease (a count of requests in flight cannot be split between nodes or
// pushed later: its units come back when a request ends, on whichever node
// that is), and the other requests on their local state; if the
// concurrency requests are rejected, the others are decided without being
// counted, and if the others are rejected, the lease is released. When the
// store cannot hold the lease (it does not hold leases, is unreachable or
// its breaker is open), or no request is a concurrency request on a split
// or delayed node, Acquire returns an error wrapping store.ErrNoLeases, and
// the caller decides with Decide instead, under the rules' failure
// policies.
func (n *Node) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	ls, ok := n.shared.(store.Leaser)
	if !ok {
		return fmt.Errorf("distributed: leases need a shared store that holds them: %w", store.ErrNoLeases)
	}
	if n.arr != Centralized {
		return n.acquireConcurrency(ctx, now, id, ls, reqs, out)
	}
	return n.acquireShared(ctx, now, id, ls, reqs, out, true)
}

// acquireShared acquires reqs under lease id in the shared store, noting
// the decisions as the keys' views if note is set.
func (n *Node) acquireShared(ctx context.Context, now int64, id lease.ID, ls store.Leaser, reqs []store.Request, out []algorithm.Decision, note bool) error {
	if !n.br.allow(n.clock()) {
		return fmt.Errorf("distributed: breaker open: %w", store.ErrNoLeases)
	}
	// A call abandoned at its deadline may still run, so it gets its own
	// copies of the caller's slices.
	tmp := make([]algorithm.Decision, len(reqs))
	rs := append([]store.Request(nil), reqs...)
	err := n.timedCall(ctx, func(c context.Context) error { return ls.Acquire(c, now, id, rs, tmp) })
	if err != nil {
		if ctx.Err() != nil {
			n.br.abandon()
			return ctx.Err()
		}
		n.decideFailed(err)
		return fmt.Errorf("distributed: acquire: %v: %w", err, store.ErrNoLeases)
	}
	n.storeOK()
	copy(out, tmp)
	if note {
		n.noteViews(now, reqs, out)
	}
	return nil
}

// acquireConcurrency is Acquire on a split or delayed node: concurrency
// requests in the shared store under lease id, the others locally.
func (n *Node) acquireConcurrency(ctx context.Context, now int64, id lease.ID, ls store.Leaser, reqs []store.Request, out []algorithm.Decision) error {
	if err := checkReqs(reqs, out); err != nil {
		return err
	}
	var conc, local []int
	for i := range reqs {
		if _, ok := reqs[i].Algorithm.(algorithm.Leaser); ok {
			conc = append(conc, i)
		} else {
			local = append(local, i)
		}
	}
	if len(conc) == 0 {
		return fmt.Errorf("distributed: no concurrency request to hold a lease: %w", store.ErrNoLeases)
	}
	creqs, cout := pick(reqs, conc), make([]algorithm.Decision, len(conc))
	if err := n.acquireShared(ctx, now, id, ls, creqs, cout, false); err != nil {
		return err
	}
	held := allAllowed(creqs, cout)
	if len(local) > 0 {
		lreqs, lout := pick(reqs, local), make([]algorithm.Decision, len(local))
		if err := n.decideHere(now, lreqs, lout, held); err != nil {
			return err
		}
		if held && !allAllowed(lreqs, lout) {
			// Rejected by a local limit: the concurrency units go back.
			if _, err := n.ReleaseLease(ctx, now, id, creqs); err != nil {
				return err
			}
			for i := range cout {
				if cout[i].Allowed {
					cout[i].Remaining += creqs[i].Cost
				}
			}
		}
		for j, i := range local {
			out[i] = lout[j]
		}
	}
	for j, i := range conc {
		out[i] = cout[j]
	}
	return nil
}

// ReleaseLease implements store.Leaser: every arrangement holds leases in
// the shared store (see Acquire), and releases them there.
func (n *Node) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	ls, ok := n.shared.(store.Leaser)
	if !ok {
		return false, fmt.Errorf("distributed: leases need a shared store that holds them: %w", store.ErrNoLeases)
	}
	var held bool
	var mu sync.Mutex // held is written by a call that may outlive the wait
	rs := append([]store.Request(nil), reqs...)
	err := n.timedCall(ctx, func(c context.Context) error {
		h, e := ls.ReleaseLease(c, now, id, rs)
		mu.Lock()
		held = h
		mu.Unlock()
		return e
	})
	if err != nil {
		return false, n.storeError(ctx, err, "release")
	}
	n.storeOK()
	mu.Lock()
	defer mu.Unlock()
	return held, nil
}
