package distributed

import (
	"context"
	"sync"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// decideCentral asks the shared store, and falls back on each request's
// failure policy when the store cannot answer.
func (n *Node) decideCentral(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	if n.br.allow(n.clock()) {
		var err error
		// A call abandoned at its deadline may still run, so it gets its
		// own copies of the caller's slices.
		if len(reqs) == 1 {
			var d algorithm.Decision
			r := reqs[0]
			var mu sync.Mutex // d is written by a call that may outlive the wait
			err = n.timedCall(ctx, func(c context.Context) error {
				got, e := n.shared.DecideOne(c, now, r)
				mu.Lock()
				d = got
				mu.Unlock()
				return e
			})
			if err == nil {
				mu.Lock()
				out[0] = d
				mu.Unlock()
			}
		} else {
			tmp := make([]algorithm.Decision, len(reqs))
			rs := append([]store.Request(nil), reqs...)
			err = n.timedCall(ctx, func(c context.Context) error { return n.shared.Decide(c, now, rs, tmp) })
			if err == nil {
				copy(out, tmp)
			}
		}
		if err == nil {
			n.storeOK()
			n.noteViews(now, reqs, out)
			return nil
		}
		if ctx.Err() != nil {
			n.br.abandon()
			return ctx.Err()
		}
		n.decideFailed(err)
	}
	return n.decideLocal(now, reqs, out, func(r *store.Request) how { return policyHow(r.OnFailure) })
}

// noteViews remembers the shared store's decisions as the last known
// global view of each key.
func (n *Node) noteViews(now int64, reqs []store.Request, out []algorithm.Decision) {
	for i := range reqs {
		s := &n.table.shards[n.table.shardOf(reqs[i].Key)]
		s.mu.Lock()
		e := s.get(reqs[i].Algorithm, reqs[i].Key, true, now)
		e.haveView, e.viewAt, e.viewLimit, e.viewRemaining = true, now, out[i].Limit, out[i].Remaining
		e.last = now
		s.mu.Unlock()
	}
}
