package distributed

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// Holds go to the shared store in every arrangement: a lease taken through
// one node takes from what a holder on another node can get, and a shared
// store that keeps no holds is ErrNoHolds.
func TestHoldsInSharedStore(t *testing.T) {
	alg := disttest.MustAlg(t, algorithm.Config{Limit: 100, Window: time.Minute, Holds: 4})
	for _, mode := range []Arrangement{Centralized, Split, Delayed} {
		t.Run(string(mode), func(t *testing.T) {
			shared := memstore.New(memstore.Options{})
			a := mustNode(t, Options{Arrangement: mode, Shared: shared, Nodes: 2, ManualSync: true, Deadline: time.Second})
			b := mustNode(t, Options{Arrangement: mode, Shared: shared, Nodes: 2, ManualSync: true, Deadline: time.Second})
			now := time.Now().UnixNano()
			req := store.Request{Algorithm: alg, Key: "k"}
			_, ra, err := a.Hold(ctx, now, req, lease.Op{ID: lease.New(), Seq: 1, Target: 60})
			if err != nil || ra.Granted != 50 {
				t.Fatalf("through a: %+v %v, want half of 100", ra, err)
			}
			_, rb, err := b.Hold(ctx, now, req, lease.Op{ID: lease.New(), Seq: 1, Target: 60})
			if err != nil || rb.Granted != 12 { // floor(50 * 60 / (2 * 120))
				t.Fatalf("through b: %+v %v", rb, err)
			}
		})
	}
	n := mustNode(t, Options{Arrangement: Centralized, Shared: newFaultStore(), ManualSync: true, Deadline: time.Second})
	if _, _, err := n.Hold(ctx, 1, store.Request{Algorithm: alg, Key: "k"}, lease.Op{ID: lease.New(), Seq: 1, Target: 1}); !errors.Is(err, store.ErrNoHolds) {
		t.Fatalf("a shared store without holds: %v", err)
	}
}
