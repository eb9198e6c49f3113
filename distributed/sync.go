package distributed

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
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

// pushed is one entry's part of a sync in flight, or an orphan's (e nil).
type pushed struct {
	e     *entry
	count int // events pushed
	o     *orphan
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
	// The breaker is asked before anything is collected: a sync it stops
	// leaves every list as it is (a fresh key stays fresh).
	if n.syncer != nil && !final && !n.br.allow(now) {
		return ErrBreakerOpen
	}
	n.seq++
	batches, parts := n.collect(now)
	// A delayed node syncs even with nothing to push: the sync-count key
	// still goes, so an idle node keeps checking that the store is there.
	heartbeat := n.arr == Delayed && n.sentinel.alg != nil
	if len(batches) == 0 && !heartbeat {
		n.br.abandon() // no call made: a probe taken says nothing
		return nil
	}
	if n.syncer == nil {
		n.release(parts)
		return fmt.Errorf("distributed: %d keys have counts to push but the shared store %s is not a store.Syncer", len(parts), n.name)
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
		n.repushed(a)
	}
	// A push again checks the store too: a store that loses its data again
	// while the node pushes its counts again must be found, or what the
	// node pushed since the first loss stays lost.
	lost := a.sentinelAt >= 0 && n.sentinel.check(a.batches[a.sentinelAt].State, now.UnixNano())
	n.syncCount.Store(n.sentinel.expected)
	if lost {
		// This sync's events reached the store; everything pushed before it
		// is gone.
		n.log.Warn("floodgate: shared store lost its counts (restart without persistence?); pushing this node's counts again",
			"node", n.id, "store", n.name)
		n.lost(a.id.Seq, now.UnixNano())
		if !n.sentinel.repush {
			return nil
		}
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
		again[i] = store.SyncBatch{Algorithm: b.Algorithm, Key: b.Key, Events: b.Events, UnseenSince: b.UnseenSince}
	}
	a.batches = again
	n.resends.Add(1)
	return n.send(ctx, now, a, final)
}

// collect takes the batches to push: every dirty entry (and, for a
// delayed node, every entry decided on within the refresh period and every
// key near its limit in use), with its unpushed events marked in flight,
// then the orphans (queued events of evicted keys) and the fresh keys
// (seen once, never synced) while the push has room.
func (n *Node) collect(now time.Time) ([]store.SyncBatch, []pushed) {
	// Reuse the last sync's slices; their States now belong to entries.
	clear(n.bufB)
	clear(n.bufP)
	c := &collector{n: n, batches: n.bufB[:0], parts: n.bufP[:0], cap: n.syncKeys, now: now.UnixNano()}
	defer func() { n.bufB, n.bufP = c.batches, c.parts }()
	// Start at another shard each sync, so that a capped sync does not
	// always leave the same shards for later.
	first := int(n.seq % numShards)
	// First every shard's main list, then (delayed) the keys near their
	// limit, up to half the push, then the fresh keys.
	for j := range n.table.shards {
		s := &n.table.shards[(first+j)%numShards]
		s.mu.Lock()
		c.main(s, now)
		s.mu.Unlock()
	}
	if n.arr == Delayed {
		c.cap = max(len(c.batches), n.syncKeys/2)
		for j := range n.table.shards {
			s := &n.table.shards[(first+j)%numShards]
			s.mu.Lock()
			c.nears(s, now)
			s.mu.Unlock()
		}
	}
	c.cap = n.syncKeys
	for j := range n.table.shards {
		s := &n.table.shards[(first+j)%numShards]
		s.mu.Lock()
		c.orphans(s)
		s.fresh = c.list(s.fresh, true)
		s.mu.Unlock()
	}
	return c.batches, c.parts
}

// orphans takes s's orphans while the push has room; the rest wait for
// the next sync, which comes at once. Their events leave the queue when
// the push succeeds (apply), or go back on the list (release). The caller
// holds s's lock.
func (c *collector) orphans(s *shard) {
	k := 0
	for ; k < len(s.orphans) && len(c.batches) < c.cap; k++ {
		o := s.orphans[k]
		c.batches = append(c.batches, store.SyncBatch{Algorithm: o.alg, Key: o.key, Events: o.events})
		c.parts = append(c.parts, pushed{count: len(o.events), o: o})
	}
	if k == 0 {
		return
	}
	rest := copy(s.orphans, s.orphans[k:])
	clear(s.orphans[rest:])
	s.orphans = s.orphans[:rest]
	if rest > 0 {
		c.n.kickSync()
	}
}

// collector gathers one push.
type collector struct {
	n       *Node
	batches []store.SyncBatch
	parts   []pushed
	cap     int   // keys the push takes at most
	now     int64 // the sync's time (Unix ns)
}

func (c *collector) take(e *entry) {
	n := c.n
	if e.gone || e.mark == n.seq || n.arr == Centralized && len(e.events) == 0 && e.owed == 0 {
		return
	}
	n.queueOwed(e)
	e.inflight = len(e.events)
	e.mark = n.seq
	c.batches = append(c.batches, store.SyncBatch{
		Algorithm:   e.alg,
		Key:         e.key,
		Events:      append([]store.Event(nil), e.events...),
		UnseenSince: n.unseenSince(e, c.now),
	})
	c.parts = append(c.parts, pushed{e: e, count: e.inflight})
}

// list takes the entries of a sync list up to the cap and returns what
// is left of it. On the fresh list, entries promoted since are skipped.
func (c *collector) list(l []*entry, fresh bool) []*entry {
	k := 0
	for ; k < len(l) && len(c.batches) < c.cap; k++ {
		e := l[k]
		if e.gone || fresh && !e.fresh {
			continue
		}
		e.dirty, e.fresh = false, false
		c.take(e)
	}
	if k == len(l) {
		clear(l)
		return l[:0]
	}
	// The rest waits for the next sync, which comes at once.
	rest := copy(l, l[k:])
	clear(l[rest:])
	c.n.kickSync()
	return l[:rest]
}

// main takes s's main sync list, and for a delayed node the entries to
// refresh and the keys near their limit. The caller holds s's lock.
func (c *collector) main(s *shard, now time.Time) {
	n := c.n
	s.dirty = c.list(s.dirty, false)
	if n.arr != Delayed {
		return
	}
	if n.refresh > 0 {
		cutoff := now.UnixNano() - int64(n.refresh)
		for _, e := range s.m {
			if e.last >= cutoff {
				c.take(e)
			}
		}
	}
}

// nears takes, while the push has room, s's keys near their limit that are
// in use: they are pulled every sync, so a node that sees a client only now
// and then does not decide on a view many intervals old. The caller holds
// s's lock.
func (c *collector) nears(s *shard, now time.Time) {
	keep := s.nears[:0]
	for _, e := range s.nears {
		if e.gone || !e.near || now.UnixNano()-e.last > int64(e.alg.IdleAfter()) {
			e.onNear = false
			continue
		}
		keep = append(keep, e)
		if len(c.batches) < c.cap {
			c.take(e) // those left are pulled by a later sync
		}
	}
	clear(s.nears[len(keep):])
	s.nears = keep
}

// release undoes collect after a failed or skipped sync: the events stay
// pending and the entries go back on the sync list.
func (n *Node) release(parts []pushed) {
	for _, p := range parts {
		if p.o != nil {
			s := &n.table.shards[n.table.shardOf(p.o.key)]
			s.mu.Lock()
			s.orphans = append(s.orphans, p.o)
			s.mu.Unlock()
			continue
		}
		s := &n.table.shards[n.table.shardOf(p.e.key)]
		s.mu.Lock()
		p.e.inflight = 0
		if len(p.e.history) == 0 {
			p.e.mark = 0 // never synced: a fresh key stays fresh
		}
		if len(p.e.events) > 0 || p.e.owed > 0 {
			s.markDirty(p.e)
		}
		s.mu.Unlock()
	}
}

// apply takes in a successful sync: the pushed events leave the pending
// list, and a delayed node's view becomes the pulled state with the events
// accepted during the call applied again. An orphan's pulled state is not
// used (its key was charged from the eviction summary if it came back);
// orphans are taken in after the entries (see settleCharge).
func (n *Node) apply(batches []store.SyncBatch, parts []pushed, now time.Time, seq uint64) {
	var done int64
	// Entries first: a key whose orphan this sync pushed keeps its charge
	// until a later pull (settleCharge), whatever the order of the push.
	for i, p := range parts {
		if p.o != nil {
			continue
		}
		e := p.e
		s := &n.table.shards[n.table.shardOf(e.key)]
		s.mu.Lock()
		sent := e.events[:p.count]
		if len(sent) > 0 && n.arr == Delayed {
			h := len(e.history)
			var owed uint64 // a push again is owed of history before this sync
			if n.sentinel.repush {
				owed = n.sentinel.lostAt
			}
			e.history = appendHistory(e.history, sent, seq, now.UnixNano()-int64(e.alg.IdleAfter()), owed)
			e.pushes++
			s.bytes += historyBytes * int64(len(e.history)-h)
		}
		n.unqueue(e, p.count)
		rest := e.events[p.count:]
		if len(rest) == 0 {
			e.events = nil // most keys get no more events: free the slice
		} else {
			e.events = append([]store.Event(nil), rest...)
		}
		e.inflight = 0
		done += int64(p.count)
		if e.owed > 0 {
			s.markDirty(e) // the queue had no room for it yet
		}
		switch n.arr {
		case Delayed:
			if st := batches[i].State; len(st) == e.alg.Words() {
				n.takeUnseen(e, batches[i].Unseen)
				if n.takeView(e, st, now.UnixNano()) {
					n.settleCharge(s, e, now.UnixNano())
				}
				s.noteNear(e, peekCharged(e.alg, e.state, e.charge, now.UnixNano()), n.count())
			}
			e.split, e.splitAlg = nil, nil
		case Centralized:
			if len(e.events) == 0 && e.owed == 0 {
				// Pushed everything: the store decides again, and the next
				// outage builds its view afresh.
				e.state, e.split, e.splitAlg = nil, nil, nil
			} else {
				s.markDirty(e)
			}
		}
		s.mu.Unlock()
	}
	for _, p := range parts {
		if p.o != nil {
			n.unqueueOrphan(p.o)
			n.retainOrphan(p.o, seq, now.UnixNano())
			done += int64(p.count)
		}
	}
	n.pending.Add(-done)
}

// settleCharge drops e's eviction-summary charge after a pull the node
// took (see takeView): the shared count holds what the key's earlier lives
// pushed, so the summary's over-count of a key that shares its cells ends
// here. It stays while an earlier life's count is still on the orphan list
// (not yet in the shared count, or pushed by this very sync), and within
// the key's idle time after the store was found to have lost data (its
// earlier lives' counts may be gone from it). The caller holds s's lock.
func (n *Node) settleCharge(s *shard, e *entry, now int64) {
	if e.charge == 0 || s.hasOrphan(e) || n.storeLostRecently(e.alg, now) {
		return
	}
	e.charge = 0
}

// takeView makes st, a state pulled after a push, e's view, with the
// events accepted during the call applied again, unless it shows less used
// than e's own view: every count this node took is in its own view, so a
// pull below it means the store lost counts (a restart without
// persistence), and the node keeps deciding on what it knows rather than
// hand the key a fresh allowance. The caller holds e's shard lock.
func (n *Node) takeView(e *entry, st []int64, now int64) (took bool) {
	for _, ev := range e.events {
		e.alg.Record(st, ev.Time, ev.Cost)
	}
	if e.owed > 0 {
		e.alg.Record(st, e.owedAt, e.owed)
	}
	if e.state != nil && used(e.alg, st, now) < used(e.alg, e.state, now) {
		n.keptViews.Add(1)
		return false
	}
	e.state = st
	return true
}

// maxHistory is how many history events a key keeps; older ones merge.
const maxHistory = 4

// appendHistory adds the events pushed by sync seq to h as one event (the
// earliest time, the summed cost, which counts them no later than they
// happened: pushed again, they never make a client at its limit be
// rejected, and they leave the window at most one sync interval early) and
// drops history at or before cutoff.
func appendHistory(h []pushedEvent, sent []store.Event, seq uint64, cutoff int64, owed uint64) []pushedEvent {
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
	if len(h) >= maxHistory {
		// Merge the two oldest: the earlier time, the summed cost. A push
		// again of the history before sync owed is owed, so two events on
		// either side of it never merge (that would push a count twice):
		// with one event before it, the two after it merge instead. A loss
		// found later is found by a sync newer than all history, so merging
		// events before it changes nothing.
		i := 0
		if owed > 0 && h[0].seq < owed && h[1].seq >= owed {
			i = 1
		}
		h[i+1].Time, h[i+1].Cost, h[i+1].seq = min(h[i].Time, h[i+1].Time), h[i].Cost+h[i+1].Cost, min(h[i].seq, h[i+1].seq)
		h = append(h[:i], h[i+1:]...)
	}
	return append(h, ev)
}

// maxRepushKeys bounds the keys a node pushes again after the store lost
// its data.
const maxRepushKeys = 1 << 16

// lost takes note that the store lost the counts pushed before sync seq:
// the keys with counts pushed before it are listed to be pushed again, in
// pushes of at most syncKeys keys between the ordinary ones, at most
// maxRepushKeys of them: keys with more than one request counted first,
// then keys counted once, the most recently used first.
// Keys beyond the bound are not pushed again (Health's RepushSkipped counts
// them); this node keeps deciding on its own view of every key it holds
// (takeView), and on the eviction summary for keys it evicted, so none of
// them gets a fresh allowance here.
func (n *Node) lost(seq uint64, now int64) {
	n.sentinel.repush, n.sentinel.lostAt = true, seq
	n.lostAtTime.Store(now)
	type owed struct {
		e    *entry
		many bool // more than one request counted
		last int64
	}
	var all []owed
	// Evicted keys whose pushed counts were retained (see retained), taken
	// before the table: a key that comes back meanwhile takes its kept
	// history into its new entry (adopt), listed then under both, which
	// repush pushes once (both resolve to the new entry).
	kept := append(n.retain.snapshot(), n.returning.snapshot()...)
	for i := range n.table.shards {
		s := &n.table.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			if cost := owedCost(e, seq, now); cost > 0 {
				all = append(all, owed{e, cost > 1, e.last})
			}
		}
		s.mu.Unlock()
	}
	// Only the sync changes kept entries' history, and it holds syncMu here.
	for _, e := range kept {
		if cost := owedCost(e, seq, now); cost > 0 {
			all = append(all, owed{e, cost > 1, e.last})
		}
	}
	if len(all) > maxRepushKeys {
		// Being near the limit does not count here: under a flood the
		// eviction summary's charge puts most one-hit keys near it.
		slices.SortFunc(all, func(a, b owed) int {
			if a.many != b.many {
				if a.many {
					return -1
				}
				return 1
			}
			return cmp.Compare(b.last, a.last)
		})
		n.repushSkipped.Add(uint64(len(all) - maxRepushKeys))
		all = all[:maxRepushKeys]
	}
	list := n.sentinel.list[:0]
	for _, o := range all {
		list = append(list, o.e)
	}
	n.sentinel.list = list
	n.repushLeft.Store(int64(len(list)))
}

// owedCost is the cost e's history holds from before sync seq still
// within its idle time at now: what a push again owes the store.
func owedCost(e *entry, seq uint64, now int64) int64 {
	var cost int64
	for _, h := range e.history {
		if h.seq < seq && h.Time > now-int64(e.alg.IdleAfter()) {
			cost += h.Cost
		}
	}
	return cost
}

// repush pushes again the history, from before the sync that found the
// store had lost its data, of the next keys listed by lost. If it fails it
// is sent again at the next sync.
func (n *Node) repush(ctx context.Context, now time.Time, final bool) error {
	if !final && !n.br.allow(now) {
		return ErrBreakerOpen
	}
	var batches []store.SyncBatch
	var parts []pushed
	list := n.sentinel.list
	taken := map[*entry]bool{}
	k := 0
	for ; k < len(list) && len(batches) < n.syncKeys; k++ {
		e := list[k]
		s := &n.table.shards[n.table.shardOf(e.key)]
		s.mu.Lock()
		e = resolve(e)
		var evs []store.Event
		for _, h := range e.history {
			if h.seq < n.sentinel.lostAt {
				evs = append(evs, h.Event)
			}
		}
		gone := e.gone
		s.mu.Unlock()
		if len(evs) == 0 || gone || taken[e] {
			continue // listed twice (see lost): pushed once
		}
		taken[e] = true
		batches = append(batches, store.SyncBatch{Algorithm: e.alg, Key: e.key, Events: evs})
		parts = append(parts, pushed{e: e, count: 0})
	}
	n.seq++
	a := &attempt{id: n.syncID(), parts: parts, sentinelAt: len(batches), repush: true, listed: k}
	a.batches = append(batches, n.sentinel.batch(now.UnixNano()))
	return n.send(ctx, now, a, final)
}

// resolve follows an entry gone from the table to the entry that holds its
// history now, if any. The caller holds the key's shard lock.
func resolve(e *entry) *entry {
	for e.gone && e.movedTo != nil {
		e = e.movedTo
	}
	return e
}

// repushed takes in a successful push of a: its keys' history now counts as
// pushed by it, and the keys leave the list.
func (n *Node) repushed(a *attempt) {
	for _, p := range a.parts {
		s := &n.table.shards[n.table.shardOf(p.e.key)]
		s.mu.Lock()
		// Along the chain: an entry evicted (or its kept copy taken back)
		// since the push was made holds the pushed history now.
		for e := p.e; e != nil; e = e.movedTo {
			for i := range e.history {
				if h := &e.history[i]; h.seq < n.sentinel.lostAt {
					h.seq = a.id.Seq
				}
			}
			if !e.gone {
				break
			}
		}
		s.mu.Unlock()
	}
	list := n.sentinel.list
	rest := copy(list, list[a.listed:])
	clear(list[rest:])
	n.sentinel.list = list[:rest]
	n.repushLeft.Store(int64(rest))
	if rest == 0 {
		n.sentinel.repush = false
	} else {
		n.kickSync()
	}
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
	}, n.answeredLate)
}

// attempt is one push to the shared store: what it sent, under which
// identity, and which entries' events it carries.
type attempt struct {
	id         store.SyncID
	batches    []store.SyncBatch
	parts      []pushed // the first count events of each entry
	sentinelAt int      // the sync-count batch, or -1
	repush     bool     // a push of the history after a store reset
	listed     int      // repush: the keys of the repush list it covers
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
			if e.dirty || e.onNear || e.inflight > 0 || len(e.events) > 0 || e.owed > 0 {
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
	list     []*entry
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

// randomID returns a short random node name.
func randomID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("node-%d", time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}
