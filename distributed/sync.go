package distributed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// gcEvery is how often Sync drops entries that have been idle for longer
// than their algorithm's idle time.
const gcEvery = 10 * time.Second

// Sync exchanges counts with the shared store once, now.
//
// A delayed node pushes the requests it accepted since its last sync and
// pulls the merged state of every key it decided on since then, of every key
// near its limit still in use, and of every key decided on within
// Options.Refresh, in one Syncer.Sync call. After a failed sync it first
// reads its own sync count to learn whether the store applied it anyway. A centralized node pushes the
// requests it accepted locally while the store was unavailable. A split
// node only drops idle state. On failure the counts are kept for the next
// Sync; while the circuit breaker is open Sync returns ErrBreakerOpen
// without calling the store.
func (n *Node) Sync(ctx context.Context) error {
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	if n.arr == Split {
		n.gc(n.clock(), false)
		return nil
	}
	return n.syncLocked(ctx, false)
}

// pushedEvent is a history event: the coalesced events one sync pushed.
type pushedEvent struct {
	store.Event
	seq uint64 // the sync that pushed them
}

// pushed is one entry's part of a sync in flight.
type pushed struct {
	e     *entry
	count int // events pushed
}

// syncLocked is Sync with syncMu held. A final sync (Close) ignores the
// breaker: it is the last chance to push.
func (n *Node) syncLocked(ctx context.Context, final bool) error {
	now := n.clock()
	n.gc(now, false)
	if n.unknown != nil {
		if err := n.resolve(ctx, now, final); err != nil {
			return err
		}
	}
	if n.sentinel.repush && n.syncer != nil {
		if err := n.repush(ctx, now, final); err != nil {
			return err
		}
	}
	n.seq++
	batches, parts := n.collect(now)
	// A delayed node syncs even with nothing to push: the sync-count key
	// still goes, so an idle node keeps checking that the store is there.
	heartbeat := n.arr == Delayed && n.sentinel.alg != nil
	if len(batches) == 0 && !heartbeat {
		return nil
	}
	if n.syncer == nil {
		n.release(parts)
		return fmt.Errorf("distributed: %d keys have counts to push but the shared store %s is not a store.Syncer", len(parts), n.name)
	}
	if !final && !n.br.allow(now) {
		n.release(parts)
		return ErrBreakerOpen
	}
	sentinelAt := -1
	if heartbeat {
		sentinelAt = len(batches)
		batches = append(batches, n.sentinel.batch(now.UnixNano()))
	}
	err := n.exchange(ctx, now, batches)
	if err != nil {
		// The abandoned call may still be writing into batches: never
		// reuse them.
		n.bufB, n.bufP = nil, nil
		if sentinelAt >= 0 {
			// The store may still apply it (a timeout, a stopped server):
			// find out before pushing these events again.
			n.unknown = &attempt{parts: append([]pushed(nil), parts...), seq: n.seq}
		}
		n.release(parts)
		return n.storeError(ctx, err, "sync with "+n.name)
	}
	n.storeOK()
	n.syncs.Add(1)
	n.apply(batches[:len(parts)], parts, now)
	if sentinelAt >= 0 && n.sentinel.check(batches[sentinelAt].State, now.UnixNano()) {
		// This sync's events reached the store; everything pushed before it
		// is gone.
		n.log.Warn("floodgate: shared store lost its counts (restart without persistence?); pushing this node's counts again",
			"node", n.id, "store", n.name)
		n.sentinel.repush, n.sentinel.lostAt = true, n.seq
		return n.repush(ctx, now, final)
	}
	return nil
}

// collect takes the batches to push: every dirty entry (and, for a
// delayed node, every entry decided on within the refresh period), with its
// unpushed events marked in flight.
func (n *Node) collect(now time.Time) ([]store.SyncBatch, []pushed) {
	// Reuse the last sync's slices; their States now belong to entries.
	clear(n.bufB)
	clear(n.bufP)
	batches, parts := n.bufB[:0], n.bufP[:0]
	defer func() { n.bufB, n.bufP = batches, parts }()
	cutoff := now.UnixNano() - int64(n.refresh)
	for i := range n.table.shards {
		s := &n.table.shards[i]
		s.mu.Lock()
		take := func(e *entry) {
			if n.arr == Centralized && len(e.events) == 0 {
				return
			}
			e.inflight = len(e.events)
			e.mark = n.seq
			batches = append(batches, store.SyncBatch{
				Algorithm: e.alg,
				Key:       e.key,
				Events:    append([]store.Event(nil), e.events...),
			})
			parts = append(parts, pushed{e: e, count: e.inflight})
		}
		for _, e := range s.dirty {
			e.dirty = false
			take(e)
		}
		s.dirty = s.dirty[:0]
		if n.arr == Delayed && n.refresh > 0 {
			for _, e := range s.m {
				if e.mark != n.seq && e.last >= cutoff {
					take(e)
				}
			}
		}
		if n.arr == Delayed {
			// Keys near their limit are pulled every sync while in use, so a
			// node that sees a client only now and then does not decide on a
			// view many intervals old.
			keep := s.nears[:0]
			for _, e := range s.nears {
				if !e.near || now.UnixNano()-e.last > int64(e.alg.IdleAfter()) {
					e.onNear = false
					continue
				}
				keep = append(keep, e)
				if e.mark != n.seq {
					take(e)
				}
			}
			clear(s.nears[len(keep):])
			s.nears = keep
		}
		s.mu.Unlock()
	}
	return batches, parts
}

// release undoes collect after a failed or skipped sync: the events stay
// pending and the entries go back on the sync list.
func (n *Node) release(parts []pushed) {
	for _, p := range parts {
		s := &n.table.shards[n.table.shardOf(p.e.key)]
		s.mu.Lock()
		p.e.inflight = 0
		if len(p.e.events) > 0 {
			s.markDirty(p.e)
		}
		s.mu.Unlock()
	}
}

// apply takes in a successful sync: the pushed events leave the pending
// list, and a delayed node's view becomes the pulled state with the events
// accepted during the call applied again.
func (n *Node) apply(batches []store.SyncBatch, parts []pushed, now time.Time) {
	var done int64
	for i, p := range parts {
		e := p.e
		s := &n.table.shards[n.table.shardOf(e.key)]
		s.mu.Lock()
		sent := e.events[:p.count]
		if len(sent) > 0 && n.arr == Delayed {
			e.history = appendHistory(e.history, sent, n.seq, now.UnixNano()-int64(e.alg.IdleAfter()))
		}
		rest := e.events[p.count:]
		if len(rest) == 0 {
			e.events = e.events[:0]
		} else {
			e.events = append([]store.Event(nil), rest...)
		}
		e.inflight = 0
		done += int64(p.count)
		switch n.arr {
		case Delayed:
			if st := batches[i].State; len(st) == e.alg.Words() {
				e.state = st
				for _, ev := range e.events {
					e.alg.Record(e.state, ev.Time, ev.Cost)
				}
				s.noteNear(e, e.alg.Peek(e.state, now.UnixNano(), 1), n.nodes)
			}
			e.split, e.splitAlg = nil, nil
		case Centralized:
			if len(e.events) == 0 {
				// Pushed everything: the store decides again, and the next
				// outage builds its view afresh.
				e.state, e.split, e.splitAlg = nil, nil, nil
			} else {
				s.markDirty(e)
			}
		}
		s.mu.Unlock()
	}
	n.pending.Add(-done)
}

// appendHistory adds the events pushed by sync seq to h as one event (the
// earliest time, the summed cost, which counts them no later than they
// happened: pushed again, they never make a client at its limit be
// rejected, and they leave the window at most one sync interval early) and
// drops history at or before cutoff.
func appendHistory(h []pushedEvent, sent []store.Event, seq uint64, cutoff int64) []pushedEvent {
	ev := pushedEvent{seq: seq}
	for i, s := range sent {
		ev.Cost += s.Cost
		if i == 0 || s.Time < ev.Time {
			ev.Time = s.Time
		}
	}
	drop := 0
	for drop < len(h) && h[drop].Time <= cutoff {
		drop++
	}
	if drop > 0 {
		h = append(h[:0], h[drop:]...)
	}
	return append(h, ev)
}

// repush pushes again every entry's history from before the sync that found
// the store had lost its data. If it fails it is retried at the next sync.
func (n *Node) repush(ctx context.Context, now time.Time, final bool) error {
	if !final && !n.br.allow(now) {
		return ErrBreakerOpen
	}
	var batches []store.SyncBatch
	var parts []pushed
	for i := range n.table.shards {
		s := &n.table.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			var evs []store.Event
			for _, h := range e.history {
				if h.seq < n.sentinel.lostAt {
					evs = append(evs, h.Event)
				}
			}
			if len(evs) == 0 {
				continue
			}
			batches = append(batches, store.SyncBatch{Algorithm: e.alg, Key: e.key, Events: evs})
			parts = append(parts, pushed{e: e, count: 0})
		}
		s.mu.Unlock()
	}
	sentinelAt := len(batches)
	batches = append(batches, n.sentinel.batch(now.UnixNano()))
	err := n.exchange(ctx, now, batches)
	if err != nil {
		n.unknown = &attempt{repush: true}
		return n.storeError(ctx, err, "pushing counts again to "+n.name)
	}
	n.storeOK()
	n.apply(batches[:len(parts)], parts, now)
	n.sentinel.adopt(batches[sentinelAt].State, now.UnixNano())
	n.sentinel.repush = false
	return nil
}

// exchange runs one Sync of batches with the shared store under the sync
// deadline.
func (n *Node) exchange(ctx context.Context, now time.Time, batches []store.SyncBatch) error {
	return call(ctx, n.syncDL, func(c context.Context) error {
		return n.syncer.Sync(c, now.UnixNano(), batches)
	})
}

// attempt is a sync that failed but may have been applied by the store.
type attempt struct {
	parts  []pushed // what it pushed: the first count events of each entry
	seq    uint64   // the sync's sequence number
	repush bool     // it was a push of the history after a store reset
}

// resolve settles the outcome of n.unknown before anything is pushed
// again: it reads the node's sync count alone (one round trip, only after
// a failure). If the failed sync was applied after all, its events leave
// the pending lists instead of being counted twice.
func (n *Node) resolve(ctx context.Context, now time.Time, final bool) error {
	if !final && !n.br.allow(now) {
		return ErrBreakerOpen
	}
	b := []store.SyncBatch{{Algorithm: n.sentinel.alg, Key: n.sentinel.key}}
	err := n.exchange(ctx, now, b)
	if err != nil {
		return n.storeError(ctx, err, "sync with "+n.name)
	}
	n.storeOK()
	a := n.unknown
	n.unknown = nil
	if len(b[0].State) != n.sentinel.alg.Words() {
		return nil
	}
	got := used(n.sentinel.alg, b[0].State, now.UnixNano())
	switch {
	case got > n.sentinel.expected: // applied
		n.sentinel.expected = got
		if a.repush {
			n.sentinel.repush = false
			return nil
		}
		var done int64
		for _, p := range a.parts {
			e := p.e
			s := &n.table.shards[n.table.shardOf(e.key)]
			s.mu.Lock()
			k := min(p.count, len(e.events))
			if k > 0 {
				e.history = appendHistory(e.history, e.events[:k], a.seq, now.UnixNano()-int64(e.alg.IdleAfter()))
				e.events = append([]store.Event(nil), e.events[k:]...)
				done += int64(k)
			}
			s.mu.Unlock()
		}
		n.pending.Add(-done)
	case got < n.sentinel.expected: // the store lost its data meanwhile
		n.sentinel.expected = got
		n.sentinel.repush, n.sentinel.lostAt = true, n.seq+1
	}
	return nil
}

// gc drops entries idle for longer than their algorithm's idle time, at
// most every gcEvery unless force.
func (n *Node) gc(now time.Time, force bool) {
	if !force && now.Sub(n.lastGC) < gcEvery {
		return
	}
	n.lastGC = now
	t := now.UnixNano()
	for i := range n.table.shards {
		s := &n.table.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.dirty || e.onNear || e.inflight > 0 || len(e.events) > 0 {
				continue
			}
			if t-e.last > int64(e.alg.IdleAfter()) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

// sentinel detects a shared store that lost its data. Each delayed sync
// also counts one event on a key of the node's own; if the count pulled back
// is lower than the syncs the node has made, the store forgot them, and with
// them the node's counts, which the node then pushes again from its history.
type sentinel struct {
	alg      algorithm.Algorithm
	key      string
	expected int64  // the count after the node's last sync
	repush   bool   // a push of the history is owed
	lostAt   uint64 // history pushed by syncs before this one is to push again
}

func (t *sentinel) init(id string) {
	// A concurrency counter only grows under Record, so its count is the
	// number of syncs made. It expires only after the longest window
	// (366 days) without a sync, longer than any key's history lives, so
	// its expiry can never be mistaken for lost data that still matters.
	// The cost is one small key per node name left behind for that long.
	a, err := algorithm.New(algorithm.Config{
		Algorithm: algorithm.Concurrency,
		Limit:     algorithm.MaxLimit,
		Window:    algorithm.MaxWindow,
	})
	if err != nil {
		return // cannot happen with valid constants; no reset detection
	}
	t.alg, t.key = a, "floodgate-node-syncs/"+id
}

func (t *sentinel) batch(now int64) store.SyncBatch {
	return store.SyncBatch{Algorithm: t.alg, Key: t.key, Events: []store.Event{{Time: now, Cost: 1}}}
}

// check takes the pulled sentinel state after a sync and reports whether the
// store lost data.
func (t *sentinel) check(state []int64, now int64) (lost bool) {
	if len(state) != t.alg.Words() {
		return false
	}
	got := used(t.alg, state, now)
	lost = got < t.expected+1
	t.expected = got
	return lost
}

// adopt takes the pulled sentinel state as the new baseline.
func (t *sentinel) adopt(state []int64, now int64) {
	if len(state) == t.alg.Words() {
		t.expected = used(t.alg, state, now)
	}
}

// randomID returns a short random node name.
func randomID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("node-%d", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}
