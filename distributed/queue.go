package distributed

import (
	"context"
	"sync"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// The pending queue is every entry's events not yet pushed. Its size is
// accounted in bytes: eventBytes per event, plus queuedKeyBytes and the
// key's length for each key that has any, and orphanKeyBytes for each
// queued orphan (its place in the shard's count of orphans by key).
const (
	eventBytes     = 16
	queuedKeyBytes = 64
	orphanKeyBytes = 32
)

// DefaultMaxPendingBytes is Options.MaxPendingBytes when left zero: 64 MiB,
// about four million single-event keys of a few bytes each.
const DefaultMaxPendingBytes = 64 << 20

// enqueue records an allowed request's cost as an event to push, under the
// queue's bound. The caller holds e's shard lock. When the queue is full the
// event is merged into the key's last event not yet in flight (the later
// time, the summed cost: the shared store counts it no earlier than it
// happened, so nothing leaves a window early); a key with no such event
// keeps the cost on its entry, owed (merged the same way), until a sync
// finds room in the queue for it (queueOwed). Health's DeferredEvents
// counts these requests; only an owing entry that the table evicts loses
// its count (DroppedEvents). Passing half the bound asks for a sync now.
func (n *Node) enqueue(s *shard, e *entry, now, cost int64) {
	need := int64(eventBytes)
	if len(e.events) == 0 {
		need += queuedKeyBytes + int64(len(e.key))
	}
	used := n.pendingBytes.Load()
	if used+need > n.maxPending {
		if len(e.events) > e.inflight {
			last := &e.events[len(e.events)-1]
			last.Time = max(last.Time, now)
			last.Cost += cost
			n.merged.Add(1)
			s.markDirty(e)
		} else {
			if e.owed == 0 {
				n.pending.Add(1) // one event, once queued
			}
			e.owed += cost
			e.owedAt = max(e.owedAt, now)
			n.deferred.Add(1)
			s.markDirty(e)
		}
		n.kickSync()
		return
	}
	e.events = append(e.events, store.Event{Time: now, Cost: cost})
	if len(e.events) > 1 {
		s.promote(e)
	}
	n.pending.Add(1)
	if n.pendingBytes.Add(need) > n.maxPending/2 && used <= n.maxPending/2 {
		n.kickSync()
	}
	s.markDirty(e)
}

// queueOwed moves e's owed cost (see enqueue) into its queued events, as
// one event at the latest time it was owed, if the queue has room. The
// caller holds e's shard lock; nothing of e is in flight.
func (n *Node) queueOwed(e *entry) {
	if e.owed == 0 {
		return
	}
	need := int64(eventBytes)
	if len(e.events) == 0 {
		need += queuedKeyBytes + int64(len(e.key))
	}
	if n.pendingBytes.Load()+need > n.maxPending {
		return
	}
	n.pendingBytes.Add(need)
	e.events = append(e.events, store.Event{Time: e.owedAt, Cost: e.owed})
	e.owed, e.owedAt = 0, 0
}

// dropOwed counts e's owed cost as dropped: e leaves the table before the
// queue had room for it, and the shared store never gets it.
func (n *Node) dropOwed(e *entry) {
	if e.owed == 0 {
		return
	}
	n.pending.Add(-1)
	n.dropped.Add(1)
	n.droppedCost.Add(uint64(e.owed))
	e.owed = 0
}

// unqueue accounts for the first k events of e leaving the queue (pushed).
// The caller holds e's shard lock and removes them.
func (n *Node) unqueue(e *entry, k int) {
	if k <= 0 {
		return
	}
	freed := int64(k) * eventBytes
	if k == len(e.events) {
		freed += queuedKeyBytes + int64(len(e.key))
	}
	n.pendingBytes.Add(-freed)
}

// orphan is the queued events of a key evicted before they were pushed
// (a fresh key while the table is full and the sync behind). They stay in
// the pending queue, accounted as they were (a key's queue record and
// eventBytes per event), on their shard's orphan list, and the next syncs
// push them under the same identities as every other count, so the shared
// store gets each exactly once. What the store returns for them is not
// used: the key's usage, these events included, went into the eviction
// summary, which charges the key if it comes back.
type orphan struct {
	alg    algorithm.Algorithm
	key    string
	events []store.Event
}

// orphanEvents moves e's queued events to s's orphan list when eviction
// takes the entry; Health's OrphanedEvents and OrphanedCost count them.
// Nothing leaves the queue: its size and bound are unchanged. The caller
// holds s's lock; nothing of e is in flight.
func (n *Node) orphanEvents(s *shard, e *entry) {
	if len(e.events) == 0 {
		return
	}
	var cost int64
	for _, ev := range e.events {
		cost += ev.Cost
	}
	s.orphans = append(s.orphans, &orphan{alg: e.alg, key: e.key, events: e.events})
	s.orphanQueued(e.key, counterOf(e.alg))
	n.pendingBytes.Add(orphanKeyBytes)
	n.orphaned.Add(uint64(len(e.events)))
	n.orphanedCost.Add(uint64(cost))
	e.events = nil
}

// unqueueOrphan accounts for o's events leaving the queue (pushed).
func (n *Node) unqueueOrphan(o *orphan) {
	n.pendingBytes.Add(-(int64(len(o.events))*eventBytes + queuedKeyBytes + orphanKeyBytes + int64(len(o.key))))
	s := &n.table.shards[n.table.shardOf(o.key)]
	s.mu.Lock()
	s.orphanPushed(o.key, counterOf(o.alg))
	s.mu.Unlock()
}

// kickSync asks the background loop to sync now.
func (n *Node) kickSync() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// localOnce gives a Syncer without store.OnceSyncer (an in-process store)
// at-most-once pushes: a push whose call was abandoned at its deadline may
// still run, and one sent again after it is then only a read. It relies on
// the Syncer applying a call whole or not at all.
type localOnce struct {
	store.Syncer
	mu   sync.Mutex
	seq  uint64 // the highest Seq applied
	done bool   // whether any was applied
}

// SyncOnce implements store.OnceSyncer.
func (l *localOnce) SyncOnce(ctx context.Context, now int64, id store.SyncID, batches []store.SyncBatch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done && id.Seq <= l.seq {
		read := make([]store.SyncBatch, len(batches))
		for i, b := range batches {
			read[i] = store.SyncBatch{Algorithm: b.Algorithm, Key: b.Key}
		}
		if err := l.Syncer.Sync(ctx, now, read); err != nil {
			return err
		}
		for i := range read {
			batches[i].State = read[i].State
		}
		return nil
	}
	if err := l.Syncer.Sync(ctx, now, batches); err != nil {
		return err
	}
	l.seq, l.done = id.Seq, true
	return nil
}
