// Package memstore is Floodgate's in-memory counter store: the default store
// of a Limiter, and the shared store that several delayed-synchronization
// nodes in one process can exchange counts with.
//
// # Layout
//
// A Store is split into a power-of-two number of shards, each with its own
// mutex. A key's shard is picked by the top bits of a 64-bit hash of the key
// (hash/maphash, with a seed chosen per store, so outsiders cannot aim keys
// at one shard or one probe chain).
//
// Inside a shard there is one table per distinct algorithm.Config: state
// identity is (Config, key), so a rule reload that keeps a rule's Config keeps
// its counters, and two rules with different Configs never share state.
//
// A table is one flat array of slots with open addressing (linear
// probing, at most 3/4 full, any size, grown by a quarter). A slot is one
// word holding 56 bits of the key's hash and 8 bits of bookkeeping (the
// last-use time, whether the state is out of line, whether the eviction
// summary charges the key), followed by the state: up to seven words in
// the slot itself. A decision on a tracked key whose state fits
// there reads and writes one place in memory: the hash, the last-use time
// and the state lie side by side, usually within one cache line. A
// token-bucket or gcra key takes a 24-byte slot; a fixed-window key a
// 16-byte one and a weighted-window key a 24-byte one, their state words
// packed two to a word (see internal/memtable/pack.go). A sliding-window key with 12 slices
// takes a 40-byte slot: its counts are 16 bits each below a limit of
// 65,536, and above it the table keeps its 32-bit counts in 16 bits until
// one passes 65,535 (then 64 bytes; see internal/memtable/pack.go).
//
// A Bound (how a floodgate.Limiter uses the store) decides the counting
// algorithms' tracked keys with their direct form (algorithm.Direct) in the
// slot itself, and lets its caller start loading a key's slot before the
// clock read (Bound.Prefetch), so that the one cache miss overlaps it.
//
// Larger states (algorithms whose Words() exceeds seven, such as
// bounded-log and sliding-log) keep three words in the slot. The store
// keeps a state only up to its last nonzero word and hands it back padded
// with zeros, so a state whose words past the third are zero stays in the
// slot (a bounded-log key with at most m units in its window); a longer
// one keeps its first two words there and the rest in a buffer of its own
// sized to its length (see internal/memtable/state.go). A bounded-log key whose state is
// whole in the slot is decided there in the common case (bounded-log's
// algorithm.Direct); others are copied out, decided and stored back up
// to their last nonzero word, which the algorithm bounds (UsedWords) so
// the store need not scan every word.
//
// # Identity by hash
//
// The store keeps the key's hash, not the key. Two distinct keys that hash
// alike under the same Config share one counter. The slot keeps 56 bits of
// the hash and the shard index fixes the top bits, so with n keys under one
// Config the chance that any two collide is below n²/2⁵⁷: about one in 3
// million for 200,000 keys, one in 9,000 for 4 million. A collision merges
// two clients' counts (the pair is limited together); it never loses a
// count. Because the seed is random per store and never leaves it,
// collisions cannot be provoked on purpose.
//
// # Expiry, bounds and eviction
//
// A key whose last use is more than its algorithm's IdleAfter() ago is
// equivalent to a never-seen key, so the store may drop it. Idle keys are
// reclaimed lazily: a few are checked at each insertion, a table is swept
// whole before it would grow and at least every half idle period, and
// Sweep reclaims all of them on demand.
//
// Options.MaxKeys bounds the number of tracked keys and Options.MaxBytes
// the bytes of the tables and out-of-line states together. A shard that is
// full evicts before it inserts: of a small random sample, an idle key,
// else the one that has used the fewest units, the least recently used
// among equals. Eviction never hands out allowance: what an evicted key had
// used, and until when, goes into a small conservative summary per table
// (see internal/memtable/sketch.go), and a key created later is charged what the summary
// says for its hash. A returning evicted key is therefore never
// under-counted; a new key whose hash meets evicted keys' entries in the
// summary may be charged more than it used, so under a flood some light
// clients lose part of their allowance for up to two windows.
// Stats counts evictions and charges.
package memstore

import (
	"context"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/memtable"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// DefaultMaxKeys is the key bound of a Store whose Options.MaxKeys is zero.
const DefaultMaxKeys = memtable.DefaultMaxKeys

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 16 per CPU (GOMAXPROCS), at least 64.
	Shards int
	// MaxKeys bounds the number of keys the store tracks, over all limits
	// together. Each shard holds at most MaxKeys/Shards (rounded up) keys,
	// and evicts before inserting beyond that, so eviction can begin
	// slightly before the store as a whole holds MaxKeys keys. Zero means
	// DefaultMaxKeys. Store.MaxKeys reports the bound in force.
	MaxKeys int
	// MaxBytes bounds the memory of the store's tables, out-of-line states,
	// eviction summary and limits, over all limits together, in bytes. A
	// sixteenth is set aside for the limits (each distinct
	// algorithm.Config is accounted 1,152 bytes plus 16 per shard, 2,176
	// with 64 shards; at least 256 limits are kept), and each shard may use
	// an equal share of the rest. Zero means no bound in bytes (MaxKeys
	// still applies). The Go runtime's own overhead (garbage not yet
	// collected, allocator slack) comes on top; see docs/operations.md.
	MaxBytes int64
}

// Stats is a snapshot of a Store's size and of what its bounds cost.
type Stats struct {
	// Keys is the number of keys tracked, idle ones not yet reclaimed
	// included.
	Keys int64
	// Bytes is the memory of the tables, out-of-line states and eviction
	// summary, as the store accounts it against MaxBytes (a packed table
	// at its plain size).
	Bytes int64
	// Evicted counts keys dropped to keep within MaxKeys or MaxBytes while
	// not idle; their use went into the eviction summary.
	Evicted int64
	// Expired counts idle keys reclaimed (each equivalent to a fresh key).
	Expired int64
	// Charged counts keys the eviction summary charged units when they
	// were created.
	Charged int64
}

// Store is an in-memory store.Store and store.Syncer. It is safe for
// concurrent use. The zero value is not usable; call New.
type Store struct {
	t      *memtable.Store
	roster roster // the nodes sharing the store (roster.go)
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Syncer      = (*Store)(nil)
	_ store.Leaser      = (*Store)(nil)
	_ store.Resetter    = (*Store)(nil)
	_ store.CountKeeper = (*Store)(nil)
	_ store.Roster      = (*Store)(nil)
)

// The root package's Limiter decides through the table of its memory store
// directly (memtable.Bound), without a method of this package's API.
func init() {
	memtable.Unwrap = func(s store.Store) *memtable.Store {
		if m, ok := s.(*Store); ok {
			return m.t
		}
		return nil
	}
}

// New returns an empty store configured by o.
func New(o Options) *Store { return &Store{t: memtable.New(memtable.Options(o))} }

// MaxKeys returns the most keys the store will track at once.
func (s *Store) MaxKeys() int { return s.t.MaxKeys() }

// MaxBytes returns the store's bound in bytes, or 0 if it has none.
func (s *Store) MaxBytes() int64 { return s.t.MaxBytes() }

// Len returns the number of keys the store tracks now, over all limits,
// including idle keys not yet reclaimed.
func (s *Store) Len() int { return s.t.Len() }

// Stats returns the store's counters, summed over its shards.
func (s *Store) Stats() Stats { return Stats(s.t.Stats()) }

// Sweep drops every key that has been idle longer than its algorithm's
// IdleAfter() as of now (Unix nanoseconds), releases memory that tables no
// longer need, and returns the number of keys dropped. The store reclaims
// idle keys by itself as it inserts new ones; Sweep is for callers that want
// memory back sooner, such as a periodic janitor.
func (s *Store) Sweep(now int64) int { return s.t.Sweep(now) }

// DecideOne decides req at time now and counts it if allowed. It allocates
// nothing when the key is already tracked. ctx is not consulted: an
// in-memory decision never blocks for long.
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	return s.t.DecideOne(ctx, now, req)
}

// Decide decides every request in reqs at time now, writing one decision per
// request into out. Every request is decided first on a copy of its key's
// state; only if every non-Shadow request is allowed are the new states
// written back, so either all allowed requests are counted or none is.
// Requests that name the same limit and key see each other's effect, in
// order. The shards involved are locked together, in a fixed order, so the
// check and the commit are one atomic step.
func (s *Store) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	return s.t.Decide(ctx, now, reqs, out)
}

// Acquire implements store.Leaser: it is Decide, with the units of every
// allowed concurrency request held under lease id.
func (s *Store) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	return s.t.Acquire(ctx, now, id, reqs, out)
}

// ReleaseLease implements store.Leaser: it gives back what lease id holds
// in the keys of reqs whose algorithm holds leases, and reports whether
// any did.
func (s *Store) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	return s.t.ReleaseLease(ctx, now, id, reqs)
}

// Hold implements store.Holder: it applies op to the key of req, whose
// algorithm keeps holds (quota leases), and decides req.Cost, in one step
// under the key's lock. What the eviction summary charges the key is
// recorded into its state first, so that what Hold grants is what the
// state holds.
func (s *Store) Hold(ctx context.Context, now int64, req store.Request, op lease.Op) (algorithm.Decision, lease.Held, error) {
	return s.t.Hold(ctx, now, req, op)
}

// Release gives back the units of reqs (see algorithm.Algorithm.Release).
// Keys the store does not track hold nothing, so they are skipped.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	return s.t.Release(ctx, now, reqs)
}

// Reset forgets key's state under a (store.Resetter): its next request
// starts with the whole allowance. Under memory pressure the eviction
// summary may still charge the key for uses of evicted keys that share
// its summary cells, as it charges any new key.
func (s *Store) Reset(ctx context.Context, a algorithm.Algorithm, key string) error {
	return s.t.Reset(ctx, a, key)
}

// Sync merges each batch's events into the store with Algorithm.Record (at
// each event's own time) and sets the batch's State to a copy of the merged
// state. A batch without events only reads. It is the shared-store side of
// delayed synchronization when the nodes share one process.
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	return s.t.Sync(ctx, now, batches)
}

// KeepsCounts reports true: the store keeps each key's count across a
// change of a's limit (store.CountKeeper), converting the key's state to
// the new limit when it next sees the key.
func (s *Store) KeepsCounts(a algorithm.Algorithm) bool { return s.t.KeepsCounts(a) }
