package distributed

import (
	"context"
	"fmt"
	"time"
)

// Health is a node's view of itself and of the shared store.
type Health struct {
	// Arrangement is the node's arrangement.
	Arrangement Arrangement
	// Store names the shared store.
	Store string
	// Up reports whether the shared store is answering (the breaker is
	// closed). A split node is always up.
	Up bool
	// BreakerOpen reports whether the circuit breaker is open or half-open.
	BreakerOpen bool
	// BreakerOpenings counts how many times the breaker has opened.
	BreakerOpenings uint64
	// SyncLag is the time since the last successful exchange with the
	// shared store (zero for split). A delayed node exchanges every
	// Interval even when idle, so a lag of several intervals means trouble;
	// a centralized node only calls the store to decide, so its lag also
	// grows when no traffic arrives.
	SyncLag time.Duration
	// Syncs counts successful synchronizations.
	Syncs uint64
	// StoreErrors counts failed or timed-out store calls.
	StoreErrors uint64
	// LastError is the most recent store error, empty if there was none.
	LastError string
	// LastErrorAt is when LastError happened. The store has answered
	// since if LastErrorAt is before the last success (SyncLag ago).
	LastErrorAt time.Time
	// PendingEvents is the number of accepted requests not yet pushed to
	// the shared store.
	PendingEvents int64
	// PendingBytes is the pending queue's size as it is bounded
	// (Options.MaxPendingBytes).
	PendingBytes int64
	// MergedEvents counts requests merged into their key's last queued
	// event because the pending queue was full.
	MergedEvents uint64
	// DeferredEvents counts accepted requests that found the pending queue
	// full and their key with no queued event to merge into: their cost
	// waits on the key's entry (in the table's bytes, applied on top of
	// every pull) and is queued by a sync once the queue has room.
	DeferredEvents uint64
	// DroppedEvents counts keys evicted from the table while such a cost
	// still waited on them (keys seen once: the table keeps keys with more
	// than one request); DroppedCost is the summed cost. These counts never
	// reach the shared store; the eviction summary still charges the key
	// on this node if it returns.
	DroppedEvents, DroppedCost uint64
	// OrphanedEvents counts accepted requests of keys seen once that the
	// full table evicted before their count was pushed (the sync behind):
	// the count stays in the pending queue, on an orphan list that later
	// syncs push, so the shared store still gets it once, and the key's
	// usage goes into the eviction summary, which charges it if it comes
	// back. OrphanedCost is their summed cost. Nothing here is dropped:
	// DroppedEvents counts what is.
	OrphanedEvents, OrphanedCost uint64
	// KeptViews counts pulls that showed a key below what this node knows
	// was counted (the store lost data): the node kept its own view.
	KeptViews uint64
	// ChargeReads counts reads of the shared count made for requests that
	// only a key's eviction-summary charge rejected (delayed), and
	// ChargesSettled the charges those reads ended: the key was then
	// decided on its shared count.
	ChargeReads, ChargesSettled uint64
	// RepushSkipped counts keys whose counts were not pushed again after
	// the store lost its data: keys counted once, and keys beyond the
	// bound of the push again (see docs/distributed.md).
	RepushSkipped uint64
	// RetainedKeys and RetainedBytes are the evicted keys whose pushed
	// counts this node keeps to push again if the store loses its data
	// (orphans once pushed, and keys evicted with any pushed count: one
	// list for keys counted once, one for the others), each list bounded
	// to a quarter of Options.MaxPendingBytes; RetainForgotten
	// counts those dropped, still within their idle time, to stay in it.
	RetainedKeys    int
	RetainedBytes   int64
	RetainForgotten uint64
	// RepushPending is how many keys are still to be pushed again after
	// the store lost its data.
	RepushPending int64
	// DeadlineMisses counts decisions whose store call missed the adaptive
	// deadline below its ceiling (decided by the failure policy, not
	// counted as store failures).
	DeadlineMisses uint64
	// Deadline is the adaptive deadline a decision's store call gets now
	// (centralized; zero otherwise).
	Deadline time.Duration
	// Keys and TableBytes are the node table's size (bounded by
	// Options.MaxKeys and MaxBytes); Evictions counts keys evicted to stay
	// within it, and EvictedCharged the keys that came back and were
	// charged from the eviction summary.
	// TableOverfull counts new keys added while nothing could be evicted
	// (every sampled entry had counts to push).
	Keys                      int64
	TableBytes                int64
	Evictions, EvictedCharged uint64
	TableOverfull             uint64
	// SyncResends counts pushes sent again under their identity after a
	// failure or timeout (the store applies each at most once).
	SyncResends uint64
	// SyncLateAnswers counts syncs that missed their deadline (each is a
	// StoreErrors) and answered later: the store was slow, not down, and
	// each late answer counts as a successful exchange, so a store that
	// answers keeps the circuit breaker closed.
	SyncLateAnswers uint64
	// Nodes is the node count the node's shares are computed with: the
	// live count last seen with Options.Membership, else Options.Nodes.
	Nodes int
	// Live reports whether Nodes comes from heartbeats (Options.Membership).
	// RosterAge is then the time since the store last answered a beat (the
	// count is that old), or -1 before the first answer, and
	// HeartbeatErrors counts beats that failed.
	Live            bool
	RosterAge       time.Duration
	HeartbeatErrors uint64
}

// Health returns the node's current health.
func (n *Node) Health() Health {
	h := Health{
		Arrangement:     n.arr,
		Store:           n.name,
		BreakerOpen:     n.br.isOpen(),
		BreakerOpenings: n.br.openings(),
		Syncs:           n.syncs.Load(),
		StoreErrors:     n.storeErrors.Load(),
		PendingEvents:   n.pending.Load(),
		PendingBytes:    n.pendingBytes.Load(),
		MergedEvents:    n.merged.Load(),
		DeferredEvents:  n.deferred.Load(),
		DroppedEvents:   n.dropped.Load(),
		DroppedCost:     n.droppedCost.Load(),
		OrphanedEvents:  n.orphaned.Load(),
		OrphanedCost:    n.orphanedCost.Load(),
		KeptViews:       n.keptViews.Load(),
		ChargeReads:     n.chargeReads.Load(),
		ChargesSettled:  n.chargesSettled.Load(),
		RepushSkipped:   n.repushSkipped.Load(),
		RepushPending:   n.repushLeft.Load(),
		SyncResends:     n.resends.Load(),
		SyncLateAnswers: n.lateAnswers.Load(),
		DeadlineMisses:  n.missed.Load(),
	}
	if n.arr == Centralized {
		h.Deadline = n.lat.deadline(time.Now().UnixNano())
	}
	h.Up = !h.BreakerOpen
	for i := range n.table.shards {
		sh := &n.table.shards[i]
		sh.mu.Lock()
		h.Keys += int64(len(sh.m))
		h.TableBytes += sh.bytes
		sh.mu.Unlock()
	}
	h.Evictions, h.EvictedCharged = n.table.evicted.Load(), n.table.charged.Load()
	h.RetainedKeys, h.RetainedBytes, h.RetainForgotten = n.retain.stats()
	rk, rb, rf := n.returning.stats()
	h.RetainedKeys, h.RetainedBytes, h.RetainForgotten = h.RetainedKeys+rk, h.RetainedBytes+rb, h.RetainForgotten+rf
	h.TableOverfull = n.table.overfull.Load()
	if n.arr != Split {
		if lag := n.clock().Sub(time.Unix(0, n.lastOK.Load())); lag > 0 {
			h.SyncLag = lag
		}
	} else {
		h.Store = "none"
	}
	n.errMu.Lock()
	h.LastError, h.LastErrorAt = n.lastErr, n.lastErrAt
	n.errMu.Unlock()
	h.Nodes = n.count()
	if m := n.mem; m != nil {
		h.Live, h.RosterAge, h.HeartbeatErrors = true, -1, m.errors.Load()
		if at := m.okAt.Load(); at != 0 {
			h.RosterAge = max(0, n.clock().Sub(time.Unix(0, at)))
		}
	}
	return h
}

// storeOK records a successful store exchange.
func (n *Node) storeOK() {
	n.lastOK.Store(n.clock().UnixNano())
	if n.br.success() {
		n.log.Info("floodgate: shared store is back, circuit breaker closed", "node", n.id, "store", n.name)
		if n.arr == Centralized && n.pending.Load() > 0 {
			n.kickSync() // push the outage's counts soon
		}
	}
}

// storeFailed records a failed store exchange.
func (n *Node) storeFailed(err error) {
	n.storeErrors.Add(1)
	n.errMu.Lock()
	n.lastErr, n.lastErrAt = err.Error(), n.clock()
	n.errMu.Unlock()
	if n.br.failure(n.clock()) {
		n.log.Warn("floodgate: shared store failing, circuit breaker open", "node", n.id, "store", n.name,
			"cooldown", n.br.cooldown, "err", err)
	}
}

// storeError records err, the failure of a store exchange made under ctx,
// and returns what the caller should: ctx's own error when ctx ended (the
// exchange then says nothing of the store's health, so the breaker's probe
// is abandoned), else err as "distributed: what: err", counted against the
// store.
func (n *Node) storeError(ctx context.Context, err error, what string) error {
	if ctx.Err() != nil {
		n.br.abandon()
		return ctx.Err()
	}
	n.storeFailed(err)
	return fmt.Errorf("distributed: %s: %w", what, err)
}

// lateFactor times its deadline is how long an abandoned sync call may run
// on to answer late (see call).
const lateFactor = 4

// call runs f with deadline d. If f does not return in time, call returns
// an error wrapping context.DeadlineExceeded without waiting for it (a
// store that ignores its context cannot hold the caller past the deadline),
// and f runs on, up to lateFactor times d: if it then succeeds, late is
// called. A store that answers late is slow, not down.
func call(ctx context.Context, d time.Duration, f func(context.Context) error, late func()) error {
	cctx, cancel := context.WithTimeout(ctx, lateFactor*d)
	done := make(chan error, 1)
	go func() {
		defer cancel()
		done <- f(cctx)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	go func() {
		if err := <-done; err == nil && late != nil {
			late()
		}
	}()
	return fmt.Errorf("shared store did not answer within %v: %w", d, context.DeadlineExceeded)
}

// answeredLate records that a sync abandoned at its deadline answered
// later: the store is slow, not down, so it counts as a successful
// exchange (the breaker's failures start again from zero).
func (n *Node) answeredLate() {
	n.lateAnswers.Add(1)
	n.storeOK()
}
