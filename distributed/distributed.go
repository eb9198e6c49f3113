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
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

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

	br       breaker
	lat      latency // round trips, for the adaptive deadline
	table    *table
	algs     sync.Map     // splitKey -> algorithm.Algorithm (a part of a limit)
	mem      *membership  // the live nodes, if Options.Membership
	ramps    sync.Map     // algorithm.Config -> *ramp: a live split node's shares
	rampSeed maphash.Seed // for the counters of shares (counterName)
	// regions counts the regions sharing the limits (1 without
	// Options.Region); cut is set while this region is cut off from another.
	regions     int
	linkTimeout time.Duration
	cut         atomic.Bool

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
	n.startMembership(o.ManualSync)
	if !o.ManualSync {
		n.stop, n.done = make(chan struct{}), make(chan struct{})
		go n.loop()
	}
	return n, nil
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
// and those it owes again to a store found to have lost its data, sending
// failed pushes again until ctx ends (a ctx without a deadline gets one
// try). It returns an error saying how many accepted requests were not
// pushed, if any. The node must not be used afterwards, but for Health,
// which then reports its final counts.
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
	n.stopMembership(ctx)
	if n.arr == Split {
		return nil
	}
	n.syncMu.Lock()
	defer n.syncMu.Unlock()
	// One sync pushes at most MaxSyncKeys keys, and a push that fails is
	// sent again: go on until nothing is left (no count pending, no push
	// again owed after a loss) or ctx ends.
	start := n.clock()
	var err error
	for {
		before := n.pending.Load()
		err = n.syncLocked(ctx, true)
		left := n.pending.Load()
		if err == nil && n.out == nil && !n.sentinel.repush && (left == 0 || left >= before) {
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
		again := ""
		if k := n.repushLeft.Load(); k > 0 {
			again = fmt.Sprintf(" (and the counts of %d keys it lost not pushed again)", k)
		}
		return fmt.Errorf("distributed: %d accepted requests not pushed to %s%s after %v: %w",
			left, n.name, again, n.clock().Sub(start).Round(time.Millisecond), err)
	}
	return nil
}
