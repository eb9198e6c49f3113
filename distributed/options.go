package distributed

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// Arrangement names how a node shares its limits with other nodes. Its
// values are the constants below, as written in configuration and on the
// command line; Valid tells a known name from any other string.
type Arrangement string

// The arrangements.
const (
	Centralized Arrangement = "centralized"
	Split       Arrangement = "split"
	Delayed     Arrangement = "delayed"
)

// Arrangements returns the arrangement names in a stable order.
func Arrangements() []Arrangement { return []Arrangement{Centralized, Split, Delayed} }

// Valid reports whether a is one of Arrangements.
func (a Arrangement) Valid() bool {
	switch a {
	case Centralized, Split, Delayed:
		return true
	}
	return false
}

// Options configures a Node.
type Options struct {
	// Arrangement is Centralized, Split or Delayed.
	Arrangement Arrangement
	// Nodes is the number of limiter nodes sharing the rules. Split
	// enforces limit/Nodes on each; FailLocal uses it the same way during
	// an outage. Zero means 1, unless Membership is set.
	Nodes int
	// Membership, if set, makes the node count the live nodes through
	// heartbeats in the shared store and use that count where it would use
	// Nodes (which must then be zero).
	Membership *Membership
	// Region, if set, makes the node one of a region's nodes among
	// several regions that share the limits (see Region).
	Region *Region
	// Interval is how often a delayed node synchronizes (and how often a
	// centralized node retries pushing counts taken during an outage).
	// Zero means 200ms.
	Interval time.Duration
	// Deadline is the least time a decision waits for the shared store
	// (the adaptive deadline's floor). A centralized node waits for each
	// call three times the slowest round trip of the last second or two,
	// between Deadline and MaxDeadline; a call that misses a deadline
	// below MaxDeadline sends its decision to the failure policy but is
	// not counted as a store failure. Zero means 5ms.
	Deadline time.Duration
	// MaxDeadline is the most a decision waits for the shared store (the
	// ceiling). Calls that reach it, and store errors, are the failures
	// that open the circuit breaker. Zero means 250ms, or
	// Deadline if that is longer.
	MaxDeadline time.Duration
	// SyncDeadline bounds one Sync call to the shared store. Zero means
	// one second or Interval, whichever is longer. A sync that
	// times out costs an extra round trip to learn whether the store
	// applied it, so it should be generous; decisions never wait for a
	// sync.
	SyncDeadline time.Duration
	// Shared is the store the nodes share. Centralized needs a store.Store
	// (and a store.Syncer to push counts taken during an outage); Delayed
	// needs a store.Syncer. Split ignores it.
	Shared store.Store
	// Syncer is the shared store's synchronization side. Nil means Shared,
	// if it implements store.Syncer.
	Syncer store.Syncer
	// StoreName names the shared store in Health and logs (for example
	// "redis://10.0.0.5:6379"). Empty means its Go type.
	StoreName string
	// ID names this node in logs and in the shared store's bookkeeping key
	// that detects a store which lost its data. Empty means a random name.
	ID string
	// Clock is the node's clock, used for synchronization, the breaker's
	// cooldown and Health. Nil means time.Now. The time of a decision is
	// the now passed to Decide.
	Clock func() time.Time
	// Logger receives breaker and synchronization events. Nil discards.
	Logger *slog.Logger
	// ManualSync turns off the background loop: the caller calls Sync
	// (tests and the simulator do, under a virtual clock).
	ManualSync bool
	// BreakerFailures is how many consecutive store failures open the
	// circuit breaker. Zero means 3.
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before one probe
	// call is let through. Zero means one second.
	BreakerCooldown time.Duration
	// Refresh makes a delayed node also pull keys it decided on within the
	// last Refresh, not only those it decided on since its last sync. Zero
	// pulls only the keys touched since the last sync, which is enough to
	// bound the overshoot; the simulator sets it to the window so every node
	// refreshes its whole view every interval, as the simulator's model does
	// (docs/distributed.md).
	Refresh time.Duration
	// MaxPendingBytes bounds the queue of accepted requests not yet pushed
	// to the shared store, in bytes (16 per event, plus the key and 64 per
	// key with events, and 32 more for an evicted key's). When it is full,
	// a key's new event is merged into its last one, and the cost of a key
	// with none queued waits on its entry until a sync finds room (it is
	// dropped, and counted in Health, only if the table evicts the key
	// first). Zero means DefaultMaxPendingBytes.
	MaxPendingBytes int64
	// MaxSyncKeys bounds the keys whose counts one sync pushes, so a sync
	// fits its deadline however many keys have counts; the rest go in the
	// next sync, started at once. Zero means 8192.
	MaxSyncKeys int
	// MaxKeys and MaxBytes bound the node's table of keys (its local
	// views, states and history, and its eviction summary; pending events
	// are bounded by MaxPendingBytes). When a new key does not fit, the
	// least recently used of a few entries with nothing to push or pull is
	// evicted, and what it had used is kept in a summary that charges the
	// key again if it returns (until its first pull), so eviction never
	// gives a key back an allowance it spent. Zero means 2^21 keys and
	// DefaultMaxBytes (512 MiB).
	MaxKeys  int
	MaxBytes int64
}

// applyDefaults checks o's bounds and fills the defaults of what it left
// zero.
func (n *Node) applyDefaults(o Options) error {
	switch {
	case n.nodes < 0:
		return fmt.Errorf("distributed: Nodes must be at least 1, got %d", n.nodes)
	case n.nodes == 0:
		n.nodes = 1
	}
	if n.interval < 0 || n.deadline < 0 || n.syncDL < 0 || o.BreakerCooldown < 0 || o.BreakerFailures < 0 || n.refresh < 0 ||
		o.MaxPendingBytes < 0 || o.MaxSyncKeys < 0 || o.MaxDeadline < 0 {
		return errors.New("distributed: Interval, Deadline, SyncDeadline, Refresh, MaxDeadline, MaxPendingBytes, MaxSyncKeys and the breaker settings must not be negative")
	}
	if n.interval == 0 {
		n.interval = defaultInterval
	}
	if n.deadline == 0 {
		n.deadline = defaultDeadline
	}
	if err := n.lat.init(n.deadline, o.MaxDeadline); err != nil {
		return err
	}
	if n.syncDL == 0 {
		n.syncDL = max(defaultSyncDeadline, n.interval)
	}
	n.br.threshold, n.br.cooldown = o.BreakerFailures, o.BreakerCooldown
	if n.br.threshold == 0 {
		n.br.threshold = defaultBreakerFailures
	}
	if n.br.cooldown == 0 {
		n.br.cooldown = defaultBreakerCooldown
	}
	if n.clock == nil {
		n.clock = time.Now
	}
	if n.log == nil {
		n.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if n.syncer == nil && n.shared != nil {
		n.syncer, _ = n.shared.(store.Syncer)
	}
	if n.id == "" {
		n.id = randomID()
	}
	n.origin = n.id + "/" + randomID()
	n.remember = max(defaultRemember, 100*n.syncDL)
	n.rampSeed = maphash.MakeSeed()
	if err := n.initMembership(o); err != nil {
		return err
	}
	if err := n.initRegion(o); err != nil {
		return err
	}
	if n.syncer != nil {
		if o, ok := n.syncer.(store.OnceSyncer); ok {
			n.once = o
		} else {
			n.once = &localOnce{Syncer: n.syncer}
		}
	}
	return n.initBounds(o)
}

// checkArrangement checks that the arrangement has the store it needs.
func (n *Node) checkArrangement() error {
	switch n.arr {
	case Centralized:
		if n.shared == nil {
			return errors.New("distributed: the centralized arrangement needs a Shared store")
		}
	case Delayed:
		if n.syncer == nil {
			return errors.New("distributed: the delayed arrangement needs a shared store that implements store.Syncer")
		}
	case Split:
	default:
		return fmt.Errorf("distributed: unknown arrangement %q: want one of %v", n.arr, Arrangements())
	}
	return nil
}

// defaultName names the store after its type when Options gave no name.
func (n *Node) defaultName() {
	if n.name == "" {
		switch {
		case n.shared != nil:
			n.name = fmt.Sprintf("%T", n.shared)
		case n.syncer != nil:
			n.name = fmt.Sprintf("%T", n.syncer)
		default:
			n.name = "none"
		}
	}
}

// initBounds sets the table's, the pending queue's and the syncs' bounds
// from o.
func (n *Node) initBounds(o Options) error {
	if o.MaxKeys < 0 || o.MaxBytes < 0 {
		return errors.New("distributed: MaxKeys and MaxBytes must not be negative")
	}
	maxKeys, maxBytes := o.MaxKeys, o.MaxBytes
	if maxKeys == 0 {
		maxKeys = defaultMaxKeys
	}
	if maxBytes == 0 {
		maxBytes = DefaultMaxBytes
	}
	n.table = newTable(maxKeys, maxBytes)
	n.table.evictFresh = n.arr == Delayed
	if n.arr == Delayed {
		n.table.onEvict = n.evicted
		n.retain.index = map[entryKey]*entry{}
		n.returning.index = map[entryKey]*entry{}
		n.table.onCreate = n.adoptKept
	}
	n.maxSyncKeys = o.MaxSyncKeys
	if n.maxSyncKeys == 0 {
		n.maxSyncKeys = defaultMaxSyncKeys
	}
	n.syncKeys = n.maxSyncKeys
	n.maxPending = o.MaxPendingBytes
	if n.maxPending == 0 {
		n.maxPending = DefaultMaxPendingBytes
	}
	n.retain.max = n.maxPending / 4
	n.returning.max = n.maxPending / 4
	return nil
}
