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
//
// Every push is an attempt with an identity (store.SyncID). An attempt that
// fails stays outstanding and is sent again, unchanged and under the same
// identity, before anything new is pushed, so a store that applied it
// already (a reply lost or late) skips it: each count is applied once.
func (n *Node) syncLocked(ctx context.Context, final bool) error {
	now := n.clock()
	n.gc(now, false)
	if n.out != nil {
		if err := n.retry(ctx, now, final); err != nil {
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
	a := &attempt{id: n.syncID(), parts: parts, sentinelAt: -1}
	if heartbeat {
		a.sentinelAt = len(batches)
		batches = append(batches, n.sentinel.batch(now.UnixNano()))
	}
	a.batches = batches
	return n.send(ctx, now, a, final)
}

// syncID returns the identity of a new push: this node instance and the
// current sequence number.
func (n *Node) syncID() store.SyncID {
	return store.SyncID{Origin: n.origin, Seq: n.seq, Remember: n.remember}
}

// send pushes attempt a. On failure a stays outstanding (n.out), its events
// in flight, to be sent again by the next sync; on success its outcome is
// applied.
//
// A push that misses its deadline makes the next ones fit better: the
// next resend gets twice the time (up to maxSyncBackoff sync deadlines),
// and new pushes carry half as many keys (at least minSyncKeys); each
// success gives back a quarter of the keys and the plain deadline.
func (n *Node) send(ctx context.Context, now time.Time, a *attempt, final bool) error {
	err := n.exchange(ctx, a.id, a.batches, n.syncDL<<n.backoff)
	if err != nil {
		// The abandoned call may still be writing into the batches: never
		// reuse them (a resend gets fresh ones).
		n.bufB, n.bufP = nil, nil
		n.out = a
		if ctx.Err() == nil {
			n.backoff = min(n.backoff+1, maxSyncBackoff)
			n.syncKeys = max(minSyncKeys, n.syncKeys/2)
		}
		what := "sync with " + n.name
		if a.repush {
			what = "pushing counts again to " + n.name
		}
		return n.storeError(ctx, err, what)
	}
	n.out = nil
	n.backoff = 0
	n.syncKeys = min(n.maxSyncKeys, n.syncKeys+n.syncKeys/4+1)
	n.storeOK()
	n.syncs.Add(1)
	n.apply(a.batches[:len(a.parts)], a.parts, now, a.id.Seq)
	if a.repush {
		n.sentinel.adopt(a.batches[a.sentinelAt].State, now.UnixNano())
		n.sentinel.repush = false
		return nil
	}
	if a.sentinelAt >= 0 && n.sentinel.check(a.batches[a.sentinelAt].State, now.UnixNano()) {
		// This sync's events reached the store; everything pushed before it
		// is gone.
		n.log.Warn("floodgate: shared store lost its counts (restart without persistence?); pushing this node's counts again",
			"node", n.id, "store", n.name)
		n.sentinel.repush, n.sentinel.lostAt = true, a.id.Seq
		return n.repush(ctx, now, final)
	}
	return nil
}

// retry sends the outstanding attempt again under its identity.
func (n *Node) retry(ctx context.Context, now time.Time, final bool) error {
	if !final && !n.br.allow(now) {
		return ErrBreakerOpen
	}
	a := n.out
	// Field by field: an abandoned call may still be writing the States.
	again := make([]store.SyncBatch, len(a.batches))
	for i := range a.batches {
		b := &a.batches[i]
		again[i] = store.SyncBatch{Algorithm: b.Algorithm, Key: b.Key, Events: b.Events}
	}
	a.batches = again
	n.resends.Add(1)
	return n.send(ctx, now, a, final)
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
	// Start at another shard each sync, so that a capped sync does not
	// always leave the same shards for later.
	first := int(n.seq % numShards)
	for j := range n.table.shards {
		s := &n.table.shards[(first+j)%numShards]
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
		k := 0
		for ; k < len(s.dirty) && len(batches) < n.syncKeys; k++ {
			s.dirty[k].dirty = false
			take(s.dirty[k])
		}
		if k < len(s.dirty) {
			// The rest waits for the next sync, which comes at once.
			rest := copy(s.dirty, s.dirty[k:])
			clear(s.dirty[rest:])
			s.dirty = s.dirty[:rest]
			n.kickSync()
		} else {
			s.dirty = s.dirty[:0]
		}
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
				if e.gone || !e.near || now.UnixNano()-e.last > int64(e.alg.IdleAfter()) {
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
func (n *Node) apply(batches []store.SyncBatch, parts []pushed, now time.Time, seq uint64) {
	var done int64
	for i, p := range parts {
		e := p.e
		s := &n.table.shards[n.table.shardOf(e.key)]
		s.mu.Lock()
		sent := e.events[:p.count]
		if len(sent) > 0 && n.arr == Delayed {
			h := len(e.history)
			e.history = appendHistory(e.history, sent, seq, now.UnixNano()-int64(e.alg.IdleAfter()))
			s.bytes += historyBytes * int64(len(e.history)-h)
		}
		n.unqueue(e, p.count)
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
// the store had lost its data. If it fails it is sent again at the next
// sync.
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
	n.seq++
	a := &attempt{id: n.syncID(), parts: parts, sentinelAt: len(batches), repush: true}
	a.batches = append(batches, n.sentinel.batch(now.UnixNano()))
	return n.send(ctx, now, a, final)
}

// Bounds of a push's adaptation to a store that cannot take it in time.
const (
	maxSyncBackoff = 6   // a resend waits at most 64 sync deadlines
	minSyncKeys    = 256 // one script call
)

// exchange runs one push of batches with the shared store under deadline
// dl.
func (n *Node) exchange(ctx context.Context, id store.SyncID, batches []store.SyncBatch, dl time.Duration) error {
	now := n.clock().UnixNano()
	return call(ctx, dl, func(c context.Context) error {
		return n.once.SyncOnce(c, now, id, batches)
	})
}

// attempt is one push to the shared store: what it sent, under which
// identity, and which entries' events it carries.
type attempt struct {
	id         store.SyncID
	batches    []store.SyncBatch
	parts      []pushed // the first count events of each entry
	sentinelAt int      // the sync-count batch, or -1
	repush     bool     // a push of the history after a store reset
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
				n.table.remove(s, k, e)
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
