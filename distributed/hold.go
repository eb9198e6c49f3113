package distributed

import (
	"context"
	"fmt"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Hold implements store.Holder, when the shared store keeps holds: every
// arrangement keeps quota leases' holds in the shared store (a part of a
// key's allowance set aside for a client must be seen by every node), as it
// keeps concurrency leases there, through the node's deadline and breaker.
// The decision is noted as the key's view, so a split or delayed node's
// local decisions count the held units before its next exchange. An
// unreachable store is an error (the caller decides its request under the
// rule's failure policy, without a lease).
func (n *Node) Hold(ctx context.Context, now int64, req store.Request, op lease.Op) (algorithm.Decision, lease.Held, error) {
	hs, ok := n.shared.(store.Holder)
	if !ok {
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("distributed: holds need a shared store that keeps them: %w", store.ErrNoHolds)
	}
	if !n.br.allow(n.clock()) {
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("distributed: hold not sent: %w", ErrBreakerOpen)
	}
	// A call abandoned at its deadline may still run: it writes its own
	// result, read only when it returned in time.
	type answer struct {
		d    algorithm.Decision
		held lease.Held
	}
	res := new(answer)
	err := n.timedCall(ctx, func(c context.Context) error {
		var err error
		res.d, res.held, err = hs.Hold(c, now, req, op)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			n.br.abandon()
			return algorithm.Decision{}, lease.Held{}, ctx.Err()
		}
		n.decideFailed(err)
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("distributed: hold: %w", err)
	}
	n.storeOK()
	if n.arr != Centralized {
		n.noteViews(now, []store.Request{req}, []algorithm.Decision{res.d})
	}
	return res.d, res.held, nil
}
