package distributed

import (
	"context"
	"hash/maphash"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Settling a charge by reading the shared count.
//
// A key a delayed node makes afresh is charged what the eviction summary
// holds for it (see bound.go). The summary is a sketch: under a flood of
// other keys a new key shares its cells with evicted ones and is charged
// units it never used. The charge ends at the key's first pull, but a
// client sends its first requests within an interval, before any pull, so
// a flood left new clients rejected for units of other keys. Instead, a
// request that only the charge rejects (the key's own count allows it)
// reads the key's shared count at once and, when that count can be
// trusted to hold every earlier life of the key, decides on it: the
// shared store holds exactly what the key used, so a new key gets its
// allowance and an evicted key at its limit stays at it.
//
// The shared count is trusted when no earlier life's count is still on
// the orphan list (pending or in flight: a per-shard count of orphans by
// key says so), no push of the entry's events was confirmed during the
// read (the count read is taken with every event the entry still holds
// added, in flight or not: one the store applied before the read is
// counted twice, which only errs towards rejecting), and the store has
// not lost data (the read pulls the node's sync-count key too, and a
// store found to have lost data within the key's idle time is not read).
// Otherwise, or when the store does not answer within the sync deadline,
// the charge stands and the request is rejected, as before. A
// read never counts as a store failure: the breaker and readiness follow
// the syncs only.
//
// An entry makes at most one read (one that does not settle, or fails,
// leaves the charge to the key's first pull), only for a request the
// summary alone rejects, and waits for it at most the sync deadline.

// orphanKey identifies a key and its limit on a shard's orphan count.
func (t *table) orphanKey(key string, cfg algorithm.Config) uint64 {
	return maphash.String(t.summarySeed, key) ^ maphash.Comparable(t.summarySeed, cfg)
}

// orphanQueued counts an orphan of (key, cfg) on s. The caller holds s's
// lock.
func (s *shard) orphanQueued(key string, cfg algorithm.Config) {
	if s.orphanKeys == nil {
		s.orphanKeys = map[uint64]uint32{}
	}
	s.orphanKeys[s.t.orphanKey(key, cfg)]++
}

// orphanPushed uncounts an orphan of (key, cfg) once its push succeeded.
// The caller holds s's lock.
func (s *shard) orphanPushed(key string, cfg algorithm.Config) {
	k := s.t.orphanKey(key, cfg)
	if c := s.orphanKeys[k]; c > 1 {
		s.orphanKeys[k] = c - 1
	} else {
		delete(s.orphanKeys, k)
	}
	if len(s.orphanKeys) == 0 {
		s.orphanKeys = nil // a map keeps its size: free a flood's
	}
}

// hasOrphan reports whether an earlier life of e's key has counts on s's
// orphan list not yet pushed (or a different key with the same hash: the
// answer errs towards yes). The caller holds s's lock.
func (s *shard) hasOrphan(e *entry) bool {
	return len(s.orphanKeys) > 0 && s.orphanKeys[s.t.orphanKey(e.key, counterOf(e.alg))] > 0
}

// storeLostRecently reports whether the shared store was found to have
// lost its data within alg's idle time before now: the shared count may
// then lack what earlier lives of a key used.
func (n *Node) storeLostRecently(alg algorithm.Algorithm, now int64) bool {
	at := n.lostAtTime.Load()
	return at != 0 && now-at <= int64(alg.IdleAfter())
}

// chargeRead is an entry whose charge a read may settle, and its pushes
// when the read began.
type chargeRead struct {
	e      *entry
	pushes uint32
}

// readable reports whether a rejected request on e could be allowed on
// the key's shared count: e is charged, its own count allows the request,
// and the shared count would hold every earlier life of the key. The
// caller holds s's lock.
func (n *Node) readable(s *shard, e *entry, now, cost int64) bool {
	if e == nil || e.charge <= 0 || e.readCharge || e.gone || e.state == nil {
		return false
	}
	if s.hasOrphan(e) || n.storeLostRecently(e.alg, now) {
		return false
	}
	return e.alg.Peek(e.state, now, cost).Allowed
}

// settleRejected reads the shared count of the keys of reqs that only
// their eviction charge rejected (see readable) and ends the charge of
// those the read settles. It reports whether it settled any, so the
// requests are decided again. The read gets the sync deadline (a store
// busy with a flood's pushes answers reads late too), never more than ctx
// allows; one that answers after it still settles, for the key's next
// requests.
func (n *Node) settleRejected(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) bool {
	if n.syncer == nil || n.br.isOpen() {
		return false
	}
	var reads []chargeRead
	for i := range reqs {
		if out[i].Allowed || reqs[i].Algorithm == nil {
			continue
		}
		r := &reqs[i]
		s := &n.table.shards[n.table.shardOf(r.Key)]
		s.mu.Lock()
		if e := s.get(r.Algorithm, r.Key, false, now); n.readable(s, e, now, r.Cost) {
			e.readCharge = true
			reads = append(reads, chargeRead{e: e, pushes: e.pushes})
		}
		s.mu.Unlock()
	}
	if len(reads) == 0 {
		return false
	}
	batches := make([]store.SyncBatch, 0, len(reads)+1)
	for _, c := range reads {
		batches = append(batches, store.SyncBatch{Algorithm: c.e.alg, Key: c.e.key})
	}
	syncs := n.syncCount.Load()
	if n.sentinel.alg != nil {
		batches = append(batches, store.SyncBatch{Algorithm: n.sentinel.alg, Key: n.sentinel.key})
	}
	n.chargeReads.Add(1)
	// An abandoned read may still fill its batches: they are its own.
	err := call(ctx, n.syncDL, func(c context.Context) error { return n.syncer.Sync(c, now, batches) },
		func() { n.settle(reads, batches, syncs, now) })
	return err == nil && n.settle(reads, batches, syncs, now)
}

// settle ends the charges of reads whose shared counts batches (read at
// now, the node's sync count then syncs) can be trusted with, and reports
// whether it ended any.
func (n *Node) settle(reads []chargeRead, batches []store.SyncBatch, syncs, now int64) bool {
	if n.sentinel.alg != nil && used(n.sentinel.alg, batches[len(reads)].State, now) < syncs {
		return false // the store lost data since the last sync
	}
	settled := false
	for i, c := range reads {
		e := c.e
		s := &n.table.shards[n.table.shardOf(e.key)]
		s.mu.Lock()
		st := batches[i].State
		if !e.gone && e.pushes == c.pushes && e.charge > 0 && !s.hasOrphan(e) &&
			len(st) == e.alg.Words() && n.takeView(e, st, now) {
			e.charge = 0
			n.chargesSettled.Add(1)
			settled = true
		}
		s.mu.Unlock()
	}
	return settled
}
