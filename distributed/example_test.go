package distributed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// Two delayed-sync nodes share one memory store. Each decides locally; a
// sync tells each what the other accepted.
func Example() {
	ctx := context.Background()
	shared := memstore.New(memstore.Options{})
	now := time.Date(2026, 7, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	newNode := func() *distributed.Node {
		n, err := distributed.New(distributed.Options{
			Arrangement: distributed.Delayed, Nodes: 2, Shared: shared, Clock: clock, ManualSync: true,
		})
		if err != nil {
			panic(err)
		}
		return n
	}
	a, b := newNode(), newNode()
	defer a.Close(ctx)
	defer b.Close(ctx)

	rule, _ := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Minute})
	req := store.Request{Algorithm: rule, Key: "client-42", Cost: 1}
	for i := 0; i < 3; i++ {
		a.DecideOne(ctx, now.UnixNano(), req)
	}
	d, _ := b.DecideOne(ctx, now.UnixNano(), req)
	fmt.Println("before syncing, b sees remaining", d.Remaining)

	a.Sync(ctx) // pushes a's 3
	b.Sync(ctx) // pushes b's 1, pulls 4
	d, _ = b.DecideOne(ctx, now.UnixNano(), req)
	fmt.Println("after syncing, b sees remaining", d.Remaining)
	fmt.Println("b's store is up:", b.Health().Up)
	// Output:
	// before syncing, b sees remaining 4
	// after syncing, b sees remaining 0
	// b's store is up: true
}
