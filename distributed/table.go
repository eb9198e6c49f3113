package distributed

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/memtable"
	"github.com/floodgate-dev/floodgate/store"
)

// numShards is the number of independently locked parts of a node's table.
const numShards = 64

// entryKey identifies one counter: the key and the full configuration of the
// algorithm counting it, so two rules sharing a key never share state.
type entryKey struct {
	key string
	cfg algorithm.Config
}

// entry is a node's local knowledge of one counter.
type entry struct {
	alg algorithm.Algorithm
	key string

	// state is the local view: for delayed sync, the last pulled shared
	// state with this node's events since then applied; for split, the
	// node's own state; for centralized, the view built when the store
	// failed (nil while the store answers).
	state []int64
	// events are requests this node accepted locally and has not yet
	// pushed to the shared store. The first inflight of them are being
	// pushed by a Sync that has not returned.
	events   []store.Event
	inflight int
	// owed is cost accepted while the pending queue was full and the key
	// had no queued event to merge it into, owed to the shared store since
	// owedAt (the latest such request); a sync queues it as one event once
	// the queue has room (see enqueue).
	owed, owedAt int64
	// history is what this node pushed within the algorithm's idle time,
	// one coalesced event per sync, kept so the counts can be pushed again
	// if the shared store loses its data (a restart without persistence).
	history []pushedEvent
	// mark is the sequence number of the sync that last took the entry.
	mark uint64

	// last is the time of the last decision on this entry.
	last int64
	// dirty is set while the entry is on its shard's list of entries to
	// sync.
	dirty bool
	// near is set when the last view or decision showed the key near its
	// limit (see noteNear); a delayed node then pulls it every sync while it
	// is in use, not only after its own decisions. onNear is set while the
	// entry is on its shard's near list.
	near, onNear bool
	// gone is set when the entry has left the table (evicted or idle).
	gone bool
	// movedTo is, for an entry gone, the entry that holds its history
	// now (what eviction kept of it, or the entry of the key come back
	// that took it): a push again listed for it is made from there.
	movedTo *entry
	// fresh is set while the entry is on its shard's list of keys never
	// synced with one event queued (a delayed node pushes them after every
	// other key, and may evict them when full, their event kept to push:
	// see makeRoom).
	fresh bool

	// charge is what the eviction summary charged the key when the entry
	// was made: each decision counts it on a copy of the state; a delayed
	// node drops it once a pull gives the key's shared count (see
	// Node.settleCharge).
	charge int64
	// readCharge is set once a request only the charge rejected has read
	// the key's shared count (see settleRejected): one read per entry.
	readCharge bool
	// pushes counts the syncs that pushed events of the entry (delayed).
	pushes uint32

	// Centralized only: the last decision the shared store made, the
	// "last known global view" a failure falls back on.
	haveView      bool
	viewAt        int64
	viewLimit     int64
	viewRemaining int64

	// cut is what the key's requests that other regions have not received
	// count again while the region is cut off (see Region), as of the
	// last pull.
	cut int64

	// split is the state FailLocal decides on while the store is down: the
	// algorithm with limit/N, seeded with this node's share of the usage the
	// view showed when the outage began.
	split    []int64
	splitAlg algorithm.Algorithm
}

// shard is one locked part of the table.
type shard struct {
	mu    sync.Mutex
	t     *table
	m     map[entryKey]*entry
	bytes int64 // what the entries take, as accounted by sizeOf
	dirty []*entry
	fresh []*entry // dirty entries never synced, with one event (see entry.fresh)
	nears []*entry // entries that have been near their limit
	// orphans are queued events of evicted keys, still to push (delayed).
	// orphanKeys counts them by key and limit (see table.orphanKey) from
	// when they are queued until their push succeeds, in flight included.
	orphans    []*orphan
	orphanKeys map[uint64]uint32
	// sketches are the shard's eviction summary (see bound.go).
	sketches    map[sketchKind]*memtable.Sketch
	sketchBytes int64
}

// table is a node's local state, sharded by key, bounded in keys and bytes
// (each shard holds its part of the bounds).
type table struct {
	seed              maphash.Seed
	shards            [numShards]shard
	shardKeys         int
	shardBytes        int64
	summarySeed       maphash.Seed
	evicted, overfull atomic.Uint64
	charged           atomic.Uint64 // new entries the eviction summary charged
	// evictFresh lets eviction take fresh entries (delayed): their queued
	// events go to the shard's orphan list through onEvict, which also
	// keeps what a push again after a store loss needs (Node.evicted).
	evictFresh bool
	onEvict    func(s *shard, e *entry, now int64)
	// onCreate, when set, is called for each new entry (under its key k)
	// before it is used.
	onCreate func(s *shard, k entryKey, e *entry)
}

func newTable(maxKeys int, maxBytes int64) *table {
	t := &table{seed: maphash.MakeSeed(), shardKeys: max(1, maxKeys/numShards), shardBytes: max(1, maxBytes/numShards)}
	t.summarySeed = maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].m = make(map[entryKey]*entry)
		t.shards[i].t = t
	}
	return t
}

// shardOf returns the index of the shard that holds key.
func (t *table) shardOf(key string) int {
	return int(maphash.String(t.seed, key) % numShards)
}

// get returns the entry for (alg, key), creating it at now if create is
// set (making room under the table's bounds first). The caller holds the
// shard's lock.
func (s *shard) get(alg algorithm.Algorithm, key string, create bool, now int64) *entry {
	k := entryKey{key: key, cfg: counterOf(alg)}
	sa, share := alg.(*shareAlg)
	e := s.m[k]
	if share && e != nil {
		if e.alg.(*shareAlg).Algorithm != sa.Algorithm {
			s.reshare(e, sa, now)
		}
		e.alg = sa // the share's charge now
	} else if e != nil && e.alg != alg {
		if e.alg.Config() != alg.Config() {
			s.rebase(e, alg, now)
		}
		// The request's algorithm decides: of one Config an algorithm whose
		// parameters come with each request (gubernator's) differs from
		// request to request, and the pushed events are recorded with it.
		e.alg = alg
	}
	if e == nil && create {
		e = &entry{alg: alg, key: key}
		size := sizeOf(e)
		s.t.makeRoom(s, size, now)
		s.m[k] = e
		s.bytes += size
		if s.t.onCreate != nil {
			s.t.onCreate(s, k, e)
		}
	}
	return e
}

// reshare converts e's state, written under another share of its rule, to
// share sa at now, keeping what it counted (the algorithm's ConvertFrom;
// where it cannot, as for a sliding log, what the old state used is
// recorded at now, which counts it no less). The caller holds s's lock.
func (s *shard) reshare(e *entry, sa *shareAlg, now int64) {
	s.bytes -= sizeOf(e)
	if e.state != nil {
		from := e.alg.(*shareAlg)
		dst := make([]int64, sa.Words())
		c, ok := sa.Algorithm.(interface {
			ConvertFrom(from algorithm.Algorithm, src []int64, now int64, dst []int64) bool
		})
		if !ok || !c.ConvertFrom(from.Algorithm, e.state, now, dst) {
			clear(dst)
			if u := used(from, e.state, now); u > 0 {
				sa.Record(dst, now, u)
			}
		}
		e.state = dst
	}
	e.alg = sa
	s.bytes += sizeOf(e)
}

// counterOf returns what names the counter of alg's keys in a node's
// table: one entry for every share of a rule, and one for the limits of
// one algorithm.Config.Identity (a rule's limit before and after a reload,
// its plans), which rebase converts between.
func counterOf(alg algorithm.Algorithm) algorithm.Config {
	if sa, ok := alg.(*shareAlg); ok {
		return sa.rule
	}
	return alg.Config().Identity()
}

// rebase makes e's algorithm alg, another of the same identity (a changed
// limit), converting its local state (algorithm ConvertFrom), so that the
// node keeps the key's count; its queued events and push history are
// units at times, which alg records as they are. A state FailLocal made
// for the old limit is dropped: the next outage decision makes one for
// alg. The caller holds s's lock.
func (s *shard) rebase(e *entry, alg algorithm.Algorithm, now int64) {
	s.bytes -= sizeOf(e)
	if e.state != nil {
		dst := make([]int64, alg.Words())
		c, ok := alg.(interface {
			ConvertFrom(from algorithm.Algorithm, src []int64, now int64, dst []int64) bool
		})
		if !ok || !c.ConvertFrom(e.alg, e.state, now, dst) {
			clear(dst)
			if u := used(e.alg, e.state, now); u > 0 {
				alg.Record(dst, now, u)
			}
		}
		e.state = dst
	}
	e.split, e.splitAlg = nil, nil
	e.alg = alg
	s.bytes += sizeOf(e)
}

// charged returns what a decision on e counts beyond its state: the
// eviction summary's charge, on a live split node the part of its share's
// algorithm that its share does not hold now (see ramp), and while the
// region is cut off its requests other regions have not received, counted
// again (see Region).
func (e *entry) charged() int64 {
	c := e.charge + e.cut
	if sa, ok := e.alg.(*shareAlg); ok {
		c += sa.charge
	}
	return c
}

// markDirty puts e on the shard's sync list once. The caller holds the lock.
//
// A key never synced with a single event queued goes on the fresh list,
// pushed after every other key; it moves to the main list (promote) when
// it gets a second event or comes near its limit.
func (s *shard) markDirty(e *entry) {
	if e.dirty {
		return
	}
	e.dirty = true
	if e.mark == 0 && len(e.history) == 0 && !e.near && e.queued() == 1 {
		e.fresh = true
		s.fresh = append(s.fresh, e)
		return
	}
	s.dirty = append(s.dirty, e)
}

// promote moves a fresh entry to the main sync list (its stale place on
// the fresh list is skipped). The caller holds the lock.
func (s *shard) promote(e *entry) {
	if e.fresh {
		e.fresh = false
		s.dirty = append(s.dirty, e)
	}
}

// noteNear records whether d, a decision or a peek on e's view, shows the
// key near its limit: at half of it or more, or with fewer than 2*nodes
// units left (a stale view undercounts by about one request per other node,
// which matters when that is a large part of what is left). The caller
// holds the lock.
func (s *shard) noteNear(e *entry, d algorithm.Decision, nodes int) {
	e.near = !d.Allowed || d.Remaining*2 < d.Limit || d.Remaining < 2*int64(nodes)
	if e.near {
		s.promote(e)
	}
	if e.near && !e.onNear {
		e.onNear = true
		s.nears = append(s.nears, e)
	}
}

// ensureState gives e a zero state if it has none. The caller holds the lock.
func (e *entry) ensureState() {
	if e.state == nil {
		e.state = make([]int64, e.alg.Words())
	}
}

// used returns how many cost units state holds at now, as the algorithm
// reports it: the allowance of an empty state minus the allowance left.
func used(alg algorithm.Algorithm, state []int64, now int64) int64 {
	empty := alg.Peek(make([]int64, alg.Words()), now, 1).Remaining
	d := alg.Peek(state, now, 1)
	if !d.Allowed {
		// Remaining is not reduced by a request that does not fit.
		return empty + 1 - d.Remaining
	}
	return max(0, empty-d.Remaining)
}
