package store

import (
	"context"

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
}

// Syncer is a shared store that delayed-synchronization nodes exchange counts
// with. Sync must cost one round trip per store node for the whole batch
// list, however many keys it holds.
type Syncer interface {
	Sync(ctx context.Context, now int64, batches []SyncBatch) error
}
