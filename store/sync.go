package store

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Event is one request a node accepted locally: its time (Unix
// nanoseconds) and cost.
type Event struct {
	Time int64
	Cost int64
}

// SyncBatch is one key's exchange with the shared store in delayed
// synchronization: the node's events since its last sync go in, the shared
// state after merging them comes back.
type SyncBatch struct {
	Algorithm algorithm.Algorithm
	Key       string
	// Events are recorded into the shared state with Algorithm.Record.
	Events []Event
	// State receives the shared state after the merge; Sync sets it to a
	// slice of length Algorithm.Words().
	State []int64
	// UnseenSince, when nonzero (Unix nanoseconds), asks a store that
	// forwards its counts to other regions (redisstore with an Outbox) for
	// Unseen: the cost of this key's events since then that some other
	// region has not received yet. Other stores leave Unseen zero.
	UnseenSince int64
	Unseen      int64
}

// Syncer is a shared store that delayed-synchronization nodes exchange counts
// with. Sync must cost one round trip per store node for the whole batch
// list, however many keys it holds.
type Syncer interface {
	Sync(ctx context.Context, now int64, batches []SyncBatch) error
}

// SyncID names one batch list a node pushes, so that a store can apply it at
// most once however many times it is sent (a sync whose reply was lost or
// late is sent again with the same SyncID and the same batches).
type SyncID struct {
	// Origin names the pushing node instance. It must be unique per
	// process: two processes never share one (a node name plus a random
	// part does).
	Origin string
	// Seq increases with every new batch list from Origin. A list is sent
	// again with its Seq, and a list with a higher Seq is sent only after
	// every lower one has been applied (its SyncOnce returned nil).
	Seq uint64
	// Remember is how long the store must remember that the list was
	// applied: longer than any copy of it can stay in flight.
	Remember time.Duration
}

// OnceSyncer is a Syncer that can apply a batch list exactly once. SyncOnce
// is Sync, except that a batch list already applied under id (in whole or
// in part, for a store of several nodes) is not applied again: its events
// are skipped and the batches' States still receive the current shared
// state. Sending a list again must use the same batches in the same order.
type OnceSyncer interface {
	Syncer
	SyncOnce(ctx context.Context, now int64, id SyncID, batches []SyncBatch) error
}
