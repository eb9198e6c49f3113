// Package distributed runs one limiter node among many that share a rule.
//
// A Node implements store.Store in one of three arrangements:
//
//   - Centralized: every decision is one atomic call to the shared store.
//     No overshoot, one store round trip per decision.
//   - Split: each of Nodes nodes enforces limit/Nodes on its own and never
//     talks to the store. No store traffic, but a client whose requests land
//     unevenly on the nodes is rejected below its limit.
//   - Delayed: each node decides from its local view (the shared state it
//     last pulled, with its own decisions since then applied) and every
//     Interval pushes its new counts and pulls the merged state of the keys
//     it touched, in one Syncer.Sync call. The overshoot is bounded by what
//     the nodes accept in one interval without seeing each other.
//
// Every store call has a deadline and goes through a circuit breaker, so a
// dead or stalled store costs at most the deadline per call, and nothing while
// the breaker is open. What a request does while the store is unavailable is
// its store.FailurePolicy: open decides from the last known view plus local
// counts, closed rejects, local enforces the remaining allowance split across
// the nodes. Counts accepted while the store was down are kept and pushed
// when it returns.
package distributed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
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

// Defaults for Options fields left zero (their doc comments give the
// values).
const (
	defaultInterval        = 200 * time.Millisecond
	defaultDeadline        = 5 * time.Millisecond
	defaultBreakerFailures = 3
	defaultBreakerCooldown = time.Second
	defaultSyncDeadline    = time.Second
	// defaultRemember is the least time the shared store remembers a
	// push it applied (store.SyncID.Remember); it is also at least 100
	// sync deadlines.
	defaultRemember = time.Hour
	// defaultMaxSyncKeys is how many keys' counts one sync pushes at most.
	defaultMaxSyncKeys = 8192
)

// ErrBreakerOpen is returned by Sync when the circuit breaker is open and
// its cooldown has not passed, so no call was made.
var ErrBreakerOpen = errors.New("distributed: circuit breaker open, shared store not called")

// Options configures a Node.
type Options struct {
	// Arrangement is Centralized, Split or Delayed.
	Arrangement Arrangement
	// Nodes is the number of limiter nodes sharing the rules. Split
	// enforces limit/Nodes on each; FailLocal uses it the same way during
	// an outage. Zero means 1.
	Nodes int
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

// Node is one limiter node. It implements store.Store and is safe for
// concurrent use.
type Node struct {
	arr      Arrangement
	nodes    int
	interval time.Duration
	deadline time.Duration
	syncDL   time.Duration
	refresh  time.Duration
	shared   store.Store
	syncer   store.Syncer
	name     string
	id       string
	clock    func() time.Time
	log      *slog.Logger

	br    breaker
	lat   latency // round trips, for the adaptive deadline
	table *table
	algs  sync.Map // algorithm.Config -> algorithm.Algorithm (limit/Nodes)

	syncMu   sync.Mutex // one Sync at a time
	seq      uint64     // syncs attempted, under syncMu
	bufB     []store.SyncBatch
	bufP     []pushed
	sentinel sentinel // store reset detection (delayed)
	out      *attempt // a failed push the store may have applied, to send again
	// lostAtTime is when the store was last found to have lost its data
	// (Unix ns, 0 never).
	lostAtTime atomic.Int64
	// syncCount is the node's sync count the shared store showed at the
	// last sync (the sentinel's): a read showing less finds a store that
	// lost data.
	syncCount atomic.Int64
	lastGC    time.Time

	once     store.OnceSyncer // syncer, pushing each batch list at most once
	origin   string           // this node instance's name in store.SyncID
	remember time.Duration    // store.SyncID.Remember

	maxSyncKeys    int          // keys pushed per sync at most
	syncKeys       int          // keys the next sync pushes at most, under syncMu
	backoff        uint         // failed pushes in a row (at most maxSyncBackoff), under syncMu
	maxPending     int64        // bound of pendingBytes
	pending        atomic.Int64 // events not yet pushed
	pendingBytes   atomic.Int64 // their size, as the queue accounts it
	merged         atomic.Uint64
	deferred       atomic.Uint64 // requests owed on their entry, the queue full
	dropped        atomic.Uint64
	droppedCost    atomic.Uint64
	orphaned       atomic.Uint64 // queued events of keys evicted unpushed (pushed later)
	orphanedCost   atomic.Uint64
	keptViews      atomic.Uint64 // pulls below the node's own view, not taken
	chargeReads    atomic.Uint64 // reads of shared counts for charge-only rejections
	chargesSettled atomic.Uint64 // eviction charges those reads ended
	repushSkipped  atomic.Uint64 // keys not pushed again after a store reset
	repushLeft     atomic.Int64  // keys still to push again after a store reset
	retain         retained      // pushed counts of evicted keys, for a push again
	returning      retained      // pushed counts of evicted one-hit keys, taken back if they return
	resends        atomic.Uint64
	missed         atomic.Uint64 // store calls that missed an adaptive deadline
	lateAnswers    atomic.Uint64 // syncs abandoned at their deadline that answered later
	storeErrors    atomic.Uint64
	syncs          atomic.Uint64
	lastOK         atomic.Int64 // Unix ns of the last successful store exchange
	errMu          sync.Mutex
	lastErr        string
	lastErrAt      time.Time

	kick    chan struct{} // asks the loop to sync now
	stop    chan struct{}
	done    chan struct{}
	closeMu sync.Mutex
	closed  bool
}

// New returns a node for o, with its background loop running unless
// o.ManualSync. It returns an error naming what is wrong with o.
func New(o Options) (*Node, error) {
	n := &Node{
		arr:      o.Arrangement,
		nodes:    o.Nodes,
		interval: o.Interval,
		deadline: o.Deadline,
		syncDL:   o.SyncDeadline,
		refresh:  o.Refresh,
		shared:   o.Shared,
		syncer:   o.Syncer,
		name:     o.StoreName,
		id:       o.ID,
		clock:    o.Clock,
		log:      o.Logger,
		kick:     make(chan struct{}, 1),
	}
	if err := n.applyDefaults(o); err != nil {
		return nil, err
	}
	if err := n.checkArrangement(); err != nil {
		return nil, err
	}
	n.defaultName()
	n.sentinel.init(n.id)
	n.lastOK.Store(n.clock().UnixNano())
	n.lastGC = n.clock()
	if !o.ManualSync {
		n.stop, n.done = make(chan struct{}), make(chan struct{})
		go n.loop()
	}
	return n, nil
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

// Arrangement returns the node's arrangement.
func (n *Node) Arrangement() Arrangement { return n.arr }

// loop calls Sync every interval, or sooner when kicked, until Close.
func (n *Node) loop() {
	defer close(n.done)
	t := time.NewTicker(n.interval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.kick:
		}
		if err := n.Sync(context.Background()); err != nil && !errors.Is(err, ErrBreakerOpen) {
			n.log.Debug("floodgate: sync failed", "node", n.id, "store", n.name, "err", err)
		}
	}
}

// Close stops the background loop and pushes the counts not yet pushed,
// sending failed pushes again until ctx ends (a ctx without a deadline
// gets one try). It returns an error saying how many accepted requests
// were not pushed, if any; the node must not be used afterwards.
func (n *Node) Close(ctx context.Context) error {
	n.closeMu.Lock()
	if n.closed {
		n.closeMu.Unlock()
		return nil
	}
	n.closed = true
	n.closeMu.Unlock()
	if n.stop != nil {
		close(n.stop)
		<-n.done
	}
	if n.arr == Split {
		return nil
	}
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	// One sync pushes at most MaxSyncKeys keys, and a push that fails is
	// sent again: go on until nothing is left or ctx ends.
	start := n.clock()
	var err error
	for {
		before := n.pending.Load()
		err = n.syncLocked(ctx, true)
		left := n.pending.Load()
		if err == nil && n.out == nil && (left == 0 || left >= before) {
			break // done, or requests still arriving
		}
		if ctx.Err() != nil {
			err = ctx.Err()
			break
		}
		if err != nil {
			// Try again while ctx allows; without a deadline, once is all.
			if _, ok := ctx.Deadline(); !ok {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if left := n.pending.Load(); left > 0 || err != nil {
		if err == nil {
			err = errors.New("requests still arriving")
		}
		return fmt.Errorf("distributed: %d accepted requests not pushed to %s after %v: %w",
			left, n.name, n.clock().Sub(start).Round(time.Millisecond), err)
	}
	return nil
}

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

// splitAlg returns alg with its limits divided by the node count, cached.
func (n *Node) splitAlg(alg algorithm.Algorithm) (algorithm.Algorithm, error) {
	if n.nodes == 1 {
		return alg, nil
	}
	cfg := alg.Config()
	if a, ok := n.algs.Load(cfg); ok {
		return a.(algorithm.Algorithm), nil
	}
	a, err := algorithm.New(SplitConfig(cfg, n.nodes))
	if err != nil {
		return nil, fmt.Errorf("distributed: splitting %s across %d nodes: %w", cfg.Algorithm, n.nodes, err)
	}
	n.algs.Store(cfg, a)
	return a, nil
}

// SplitConfig returns c with its allowance divided across nodes: Limit,
// Capacity and Burst become their nth part (at least 1, rounded down so the
// nodes together never grant more than c), and Rate its nth part.
func SplitConfig(c algorithm.Config, nodes int) algorithm.Config {
	if nodes <= 1 {
		return c
	}
	n := int64(nodes)
	part := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, v/n)
	}
	c.Limit = part(c.Limit)
	c.Capacity = part(c.Capacity)
	if c.Burst > 1 {
		c.Burst = part(c.Burst)
	}
	if c.Rate > 0 {
		c.Rate /= float64(nodes)
	}
	return c
}

func checkReqs(reqs []store.Request, out []algorithm.Decision) error {
	if len(out) != len(reqs) {
		return fmt.Errorf("distributed: %d requests but %d decision slots: %w", len(reqs), len(out), store.ErrOutLength)
	}
	for i := range reqs {
		if reqs[i].Algorithm == nil {
			return fmt.Errorf("distributed: request %d: %w", i, store.ErrNoAlgorithm)
		}
	}
	return nil
}

// DecideOne implements store.Store.
func (n *Node) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	var out [1]algorithm.Decision
	reqs := [1]store.Request{req}
	err := n.Decide(ctx, now, reqs[:], out[:])
	return out[0], err
}

// Decide implements store.Store. Apart from a request without an algorithm
// or a context that ended, it returns no error: when the shared store fails,
// each request's failure policy decides.
func (n *Node) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	if err := checkReqs(reqs, out); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return nil
	}
	switch n.arr {
	case Split:
		return n.decideSplit(now, reqs, out)
	case Delayed:
		down := n.br.isOpen()
		howOf := func(r *store.Request) how {
			if down {
				return policyHow(r.OnFailure)
			}
			return howView
		}
		if err := n.decideLocal(now, reqs, out, howOf); err != nil || down {
			return err
		}
		if allAllowed(reqs, out) || !n.settleRejected(ctx, now, reqs, out) {
			return nil
		}
		// A read settled a charge that alone rejected: decide again.
		return n.decideLocal(now, reqs, out, howOf)
	default:
		return n.decideCentral(ctx, now, reqs, out)
	}
}

// Release implements store.Store. Centralized nodes release in the shared
// store (an unreachable store leaves the units taken until they expire);
// split and delayed nodes release in their local state only, so the
// concurrency algorithm belongs in the centralized arrangement.
func (n *Node) Release(ctx context.Context, now int64, reqs []store.Request) error {
	for i := range reqs {
		if reqs[i].Algorithm == nil {
			return fmt.Errorf("distributed: request %d: %w", i, store.ErrNoAlgorithm)
		}
	}
	if n.arr == Centralized {
		if !n.br.allow(n.clock()) {
			return fmt.Errorf("distributed: release not sent: %w", ErrBreakerOpen)
		}
		rs := append([]store.Request(nil), reqs...) // the call may outlive its deadline
		err := n.timedCall(ctx, func(c context.Context) error { return n.shared.Release(c, now, rs) })
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, errMissed) {
				n.br.abandon() // the probe's slot, if this call was the probe
				return fmt.Errorf("distributed: release: %w", err)
			}
			return n.storeError(ctx, err, "release")
		}
		n.storeOK()
		return nil
	}
	for _, r := range reqs {
		alg := r.Algorithm
		if n.arr == Split {
			var err error
			if alg, err = n.splitAlg(alg); err != nil {
				return err
			}
		}
		s := &n.table.shards[n.table.shardOf(r.Key)]
		s.mu.Lock()
		if e := s.get(alg, r.Key, false, now); e != nil && e.state != nil {
			alg.Release(e.state, now, r.Cost)
		}
		s.mu.Unlock()
	}
	return nil
}

// Acquire implements store.Leaser, when the shared store holds leases. A
// centralized node decides every request in the shared store. Split and
// delayed nodes decide the concurrency requests there too, under the
// lease (a count of requests in flight cannot be split between nodes or
// pushed later: its units come back when a request ends, on whichever node
// that is), and the other requests on their local state; if the
// concurrency requests are rejected, the others are decided without being
// counted, and if the others are rejected, the lease is released. When the
// store cannot hold the lease (it does not hold leases, is unreachable or
// its breaker is open), or no request is a concurrency request on a split
// or delayed node, Acquire returns an error wrapping store.ErrNoLeases, and
// the caller decides with Decide instead, under the rules' failure
// policies.
func (n *Node) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	ls, ok := n.shared.(store.Leaser)
	if !ok {
		return fmt.Errorf("distributed: leases need a shared store that holds them: %w", store.ErrNoLeases)
	}
	if n.arr != Centralized {
		return n.acquireConcurrency(ctx, now, id, ls, reqs, out)
	}
	return n.acquireShared(ctx, now, id, ls, reqs, out, true)
}

// acquireShared acquires reqs under lease id in the shared store, noting
// the decisions as the keys' views if note is set.
func (n *Node) acquireShared(ctx context.Context, now int64, id lease.ID, ls store.Leaser, reqs []store.Request, out []algorithm.Decision, note bool) error {
	if !n.br.allow(n.clock()) {
		return fmt.Errorf("distributed: breaker open: %w", store.ErrNoLeases)
	}
	// A call abandoned at its deadline may still run, so it gets its own
	// copies of the caller's slices.
	tmp := make([]algorithm.Decision, len(reqs))
	rs := append([]store.Request(nil), reqs...)
	err := n.timedCall(ctx, func(c context.Context) error { return ls.Acquire(c, now, id, rs, tmp) })
	if err != nil {
		if ctx.Err() != nil {
			n.br.abandon()
			return ctx.Err()
		}
		n.decideFailed(err)
		return fmt.Errorf("distributed: acquire: %v: %w", err, store.ErrNoLeases)
	}
	n.storeOK()
	copy(out, tmp)
	if note {
		n.noteViews(now, reqs, out)
	}
	return nil
}

// acquireConcurrency is Acquire on a split or delayed node: concurrency
// requests in the shared store under lease id, the others locally.
func (n *Node) acquireConcurrency(ctx context.Context, now int64, id lease.ID, ls store.Leaser, reqs []store.Request, out []algorithm.Decision) error {
	if err := checkReqs(reqs, out); err != nil {
		return err
	}
	var conc, local []int
	for i := range reqs {
		if _, ok := reqs[i].Algorithm.(algorithm.Leaser); ok {
			conc = append(conc, i)
		} else {
			local = append(local, i)
		}
	}
	if len(conc) == 0 {
		return fmt.Errorf("distributed: no concurrency request to hold a lease: %w", store.ErrNoLeases)
	}
	creqs, cout := pick(reqs, conc), make([]algorithm.Decision, len(conc))
	if err := n.acquireShared(ctx, now, id, ls, creqs, cout, false); err != nil {
		return err
	}
	held := allAllowed(creqs, cout)
	if len(local) > 0 {
		lreqs, lout := pick(reqs, local), make([]algorithm.Decision, len(local))
		if err := n.decideHere(now, lreqs, lout, held); err != nil {
			return err
		}
		if held && !allAllowed(lreqs, lout) {
			// Rejected by a local limit: the concurrency units go back.
			if _, err := n.ReleaseLease(ctx, now, id, creqs); err != nil {
				return err
			}
			for i := range cout {
				if cout[i].Allowed {
					cout[i].Remaining += creqs[i].Cost
				}
			}
		}
		for j, i := range local {
			out[i] = lout[j]
		}
	}
	for j, i := range conc {
		out[i] = cout[j]
	}
	return nil
}

// pick returns the requests of reqs at idx.
func pick(reqs []store.Request, idx []int) []store.Request {
	rs := make([]store.Request, len(idx))
	for j, i := range idx {
		rs[j] = reqs[i]
	}
	return rs
}

// allAllowed reports whether every request of reqs that is not Shadow was
// allowed.
func allAllowed(reqs []store.Request, out []algorithm.Decision) bool {
	for i := range reqs {
		if !out[i].Allowed && !reqs[i].Shadow {
			return false
		}
	}
	return true
}

// decideHere decides reqs on a split or delayed node's local state, as
// Decide does; unless count is set, nothing is counted (a closed request
// decided after them makes the decision keep nothing).
func (n *Node) decideHere(now int64, reqs []store.Request, out []algorithm.Decision, count bool) error {
	rs := reqs
	var howOf func(*store.Request) how
	if n.arr == Split {
		rs = append([]store.Request(nil), reqs...)
		for i := range rs {
			a, err := n.splitAlg(rs[i].Algorithm)
			if err != nil {
				return err
			}
			rs[i].Algorithm = a
		}
		howOf = func(*store.Request) how { return howSplitOwn }
	} else {
		down := n.br.isOpen()
		howOf = func(r *store.Request) how {
			if down {
				return policyHow(r.OnFailure)
			}
			return howView
		}
	}
	if count {
		return n.decideLocal(now, rs, out, howOf)
	}
	all := append(append(make([]store.Request, 0, len(rs)+1), rs...), rs[0])
	all[len(rs)].Shadow = false
	closed := &all[len(rs)]
	tmp := make([]algorithm.Decision, len(all))
	err := n.decideLocal(now, all, tmp, func(r *store.Request) how {
		if r == closed {
			return howClosed
		}
		return howOf(r)
	})
	copy(out, tmp)
	return err
}

// ReleaseLease implements store.Leaser: every arrangement holds leases in
// the shared store (see Acquire), and releases them there.
func (n *Node) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	ls, ok := n.shared.(store.Leaser)
	if !ok {
		return false, fmt.Errorf("distributed: leases need a shared store that holds them: %w", store.ErrNoLeases)
	}
	var held bool
	var mu sync.Mutex // held is written by a call that may outlive the wait
	rs := append([]store.Request(nil), reqs...)
	err := n.timedCall(ctx, func(c context.Context) error {
		h, e := ls.ReleaseLease(c, now, id, rs)
		mu.Lock()
		held = h
		mu.Unlock()
		return e
	})
	if err != nil {
		return false, n.storeError(ctx, err, "release")
	}
	n.storeOK()
	mu.Lock()
	defer mu.Unlock()
	return held, nil
}

// decideSplit decides every request against its limit/Nodes share,
// locally.
func (n *Node) decideSplit(now int64, reqs []store.Request, out []algorithm.Decision) error {
	var one [1]store.Request
	var local []store.Request
	if len(reqs) == 1 {
		local = one[:]
	} else {
		local = make([]store.Request, len(reqs))
	}
	copy(local, reqs)
	for i := range local {
		a, err := n.splitAlg(local[i].Algorithm)
		if err != nil {
			return err
		}
		local[i].Algorithm = a
	}
	return n.decideLocal(now, local, out, func(*store.Request) how { return howSplitOwn })
}

// decideCentral asks the shared store, and falls back on each request's
// failure policy when the store cannot answer.
func (n *Node) decideCentral(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	if n.br.allow(n.clock()) {
		var err error
		// A call abandoned at its deadline may still run, so it gets its
		// own copies of the caller's slices.
		if len(reqs) == 1 {
			var d algorithm.Decision
			r := reqs[0]
			var mu sync.Mutex // d is written by a call that may outlive the wait
			err = n.timedCall(ctx, func(c context.Context) error {
				got, e := n.shared.DecideOne(c, now, r)
				mu.Lock()
				d = got
				mu.Unlock()
				return e
			})
			if err == nil {
				mu.Lock()
				out[0] = d
				mu.Unlock()
			}
		} else {
			tmp := make([]algorithm.Decision, len(reqs))
			rs := append([]store.Request(nil), reqs...)
			err = n.timedCall(ctx, func(c context.Context) error { return n.shared.Decide(c, now, rs, tmp) })
			if err == nil {
				copy(out, tmp)
			}
		}
		if err == nil {
			n.storeOK()
			n.noteViews(now, reqs, out)
			return nil
		}
		if ctx.Err() != nil {
			n.br.abandon()
			return ctx.Err()
		}
		n.decideFailed(err)
	}
	return n.decideLocal(now, reqs, out, func(r *store.Request) how { return policyHow(r.OnFailure) })
}

// noteViews remembers the shared store's decisions as the last known
// global view of each key.
func (n *Node) noteViews(now int64, reqs []store.Request, out []algorithm.Decision) {
	for i := range reqs {
		s := &n.table.shards[n.table.shardOf(reqs[i].Key)]
		s.mu.Lock()
		e := s.get(reqs[i].Algorithm, reqs[i].Key, true, now)
		e.haveView, e.viewAt, e.viewLimit, e.viewRemaining = true, now, out[i].Limit, out[i].Remaining
		e.last = now
		s.mu.Unlock()
	}
}

// how says what state a request is decided on locally.
type how uint8

const (
	howView     how = iota // the local view (delayed; fail-open)
	howSplitOwn            // the split arrangement's own state, no events
	howSplit               // the limit/Nodes share of the view (fail-local)
	howClosed              // reject: the store is unavailable (fail-closed)
)

func policyHow(p store.FailurePolicy) how {
	switch p {
	case store.FailClosed:
		return howClosed
	case store.FailLocal:
		return howSplit
	default:
		return howView
	}
}

// scratch is a request's working copy of the state it is decided on.
type scratch struct {
	e     *entry
	h     how
	state []int64
}

// decideLocal decides reqs on local state: each request is decided on the
// state howOf picks, all on copies; if every request that is not Shadow is
// allowed, the copies are kept and the allowed requests recorded as events
// to push, otherwise nothing changes.
func (n *Node) decideLocal(now int64, reqs []store.Request, out []algorithm.Decision, howOf func(*store.Request) how) error {
	if len(reqs) == 1 {
		return n.decideLocalOne(now, &reqs[0], &out[0], howOf)
	}
	defer n.lockShards(reqs)()
	return n.decideLocalAll(now, reqs, out, howOf)
}

// decideLocalOne is decideLocal for one request, the common path: one
// shard, no allocation beyond the state copy.
func (n *Node) decideLocalOne(now int64, r *store.Request, out *algorithm.Decision, howOf func(*store.Request) how) error {
	s := &n.table.shards[n.table.shardOf(r.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	h := howOf(r)
	if h == howClosed {
		*out = n.closedDecision(r)
		return nil
	}
	e := s.get(r.Algorithm, r.Key, true, now)
	st, alg, err := n.target(s, e, h, now)
	if err != nil {
		return err
	}
	var d algorithm.Decision
	if h == howSplit {
		d = alg.Decide(st, now, r.Cost) // the split state holds the charge
	} else {
		d = decideCharged(alg, st, e.charge, now, r.Cost)
	}
	*out = d
	e.last = now
	if h == howView && n.arr == Delayed {
		s.noteNear(e, d, n.nodes)
	}
	if d.Allowed {
		n.commitEvent(s, e, h, now, r.Cost)
	} else if h != howSplitOwn {
		s.markDirty(e) // refresh the view of a key that rejects
	}
	return nil
}

// lockShards locks the shards of reqs' keys in ascending order and returns
// the function that unlocks them.
func (n *Node) lockShards(reqs []store.Request) (unlock func()) {
	var locked [numShards]bool
	for i := range reqs {
		locked[n.table.shardOf(reqs[i].Key)] = true
	}
	for i := range locked {
		if locked[i] {
			n.table.shards[i].mu.Lock()
		}
	}
	return func() {
		for i := range locked {
			if locked[i] {
				n.table.shards[i].mu.Unlock()
			}
		}
	}
}

// decideLocalAll is decideLocal for several requests, their shards locked:
// each is decided on a copy of its state, and the copies are kept only if
// every request that is not Shadow was allowed.
func (n *Node) decideLocalAll(now int64, reqs []store.Request, out []algorithm.Decision, howOf func(*store.Request) how) error {
	type copyKey struct {
		e     *entry
		split bool
	}
	work := make([]scratch, len(reqs))
	// One working copy per real state; a charged entry's copy holds its
	// charge too, so its state is given the allowed requests one by one.
	copies := make(map[copyKey][]int64, len(reqs))
	ok := true
	for i := range reqs {
		r := &reqs[i]
		h := howOf(r)
		if h == howClosed {
			out[i] = n.closedDecision(r)
			work[i].h = h
			if !r.Shadow {
				ok = false
			}
			continue
		}
		s := &n.table.shards[n.table.shardOf(r.Key)]
		e := s.get(r.Algorithm, r.Key, true, now)
		st, alg, err := n.target(s, e, h, now)
		if err != nil {
			return err
		}
		ck := copyKey{e, h == howSplit}
		cp, seen := copies[ck]
		if !seen {
			cp = append([]int64(nil), st...)
			if !ck.split && e.charge > 0 {
				alg.Record(cp, now, e.charge)
			}
			copies[ck] = cp
		}
		work[i] = scratch{e: e, h: h, state: cp}
		out[i] = alg.Decide(cp, now, r.Cost)
		e.last = now
		if h == howView && n.arr == Delayed {
			s.noteNear(e, out[i], n.nodes)
		}
		if !out[i].Allowed && !r.Shadow {
			ok = false
		}
	}
	if !ok {
		n.keepNone(reqs, out, work)
		return nil
	}
	for ck, cp := range copies {
		switch {
		case ck.split:
			copy(ck.e.split, cp)
		case ck.e.charge == 0:
			copy(ck.e.state, cp)
		}
	}
	for i := range reqs {
		w := &work[i]
		if w.e == nil || !out[i].Allowed {
			continue
		}
		if w.h != howSplit && w.e.charge > 0 {
			w.e.alg.Decide(w.e.state, now, reqs[i].Cost) // its copy held the charge
		}
		// The states were updated by copying the decided copies back;
		// record the event (and, for fail-local, the full view) here.
		n.commitEvent(&n.table.shards[n.table.shardOf(reqs[i].Key)], w.e, w.h, now, reqs[i].Cost)
	}
	return nil
}

// keepNone ends decideLocalAll when a request was rejected: no copy is
// kept, the decided keys are pulled at the next sync, and the requests
// allowed on their own report the allowance they did not take.
func (n *Node) keepNone(reqs []store.Request, out []algorithm.Decision, work []scratch) {
	for i := range reqs {
		if work[i].e != nil && work[i].h != howSplitOwn {
			n.table.shards[n.table.shardOf(reqs[i].Key)].markDirty(work[i].e)
		}
	}
	for i := range out {
		if out[i].Allowed {
			// Not counted after all: the allowance it took is still there.
			out[i].Remaining += reqs[i].Cost
		}
	}
}

// target returns the state and algorithm a request on e is decided on
// (for all but the split share, with e.charge still to count). The caller
// holds s, e's shard's lock.
func (n *Node) target(s *shard, e *entry, h how, now int64) ([]int64, algorithm.Algorithm, error) {
	switch h {
	case howSplit:
		if e.split == nil {
			a, err := n.splitAlg(e.alg)
			if err != nil {
				return nil, nil, err
			}
			n.ensureView(s, e, now)
			e.splitAlg = a
			e.split = make([]int64, a.Words())
			if u := used(e.alg, e.state, now) + e.charge; u > 0 {
				share := (u + int64(n.nodes) - 1) / int64(n.nodes)
				a.Record(e.split, now, share)
			}
		}
		return e.split, e.splitAlg, nil
	default:
		n.ensureView(s, e, now)
		return e.state, e.alg, nil
	}
}

// ensureView gives e a local view to decide on. For a centralized node it
// is built from the store's last decision on the key; otherwise it starts
// empty, charged what the eviction summary holds for the key. The caller
// holds s, e's shard's lock.
func (n *Node) ensureView(s *shard, e *entry, now int64) {
	if e.state != nil {
		return
	}
	e.ensureState()
	if e.haveView {
		if u := e.viewLimit - e.viewRemaining; u > 0 {
			e.alg.Record(e.state, e.viewAt, u)
		}
		return
	}
	n.table.charge(s, e, now)
}

// commitEvent records an allowed request decided on e's target state
// (already updated by Decide). The caller holds s's lock.
func (n *Node) commitEvent(s *shard, e *entry, h how, now, cost int64) {
	if h == howSplitOwn {
		return
	}
	if h == howSplit {
		e.alg.Record(e.state, now, cost) // keep the full view current too
	}
	n.enqueue(s, e, now, cost)
}

// closedDecision is a fail-closed rejection: retry once the breaker's
// cooldown has passed, when the node tries the store again.
func (n *Node) closedDecision(r *store.Request) algorithm.Decision {
	cfg := r.Algorithm.Config()
	return algorithm.Decision{Allowed: false, Limit: cfg.Limit, Reason: algorithm.ReasonStoreUnavailable, RetryAfter: n.br.cooldown}
}
