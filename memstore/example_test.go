package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// A store decides for any number of limits; state is kept per limit and key.
func ExampleNew() {
	st := memstore.New(memstore.Options{MaxKeys: 1 << 20})
	perMinute, _ := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Minute})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	for range 3 {
		d, _ := st.DecideOne(ctx, now, store.Request{Algorithm: perMinute, Key: "client-1", Cost: 1})
		fmt.Println(d.Allowed, d.Remaining)
	}
	fmt.Println("keys:", st.Len())
	// A minute later the key is idle: Sweep gives its memory back.
	fmt.Println("swept:", st.Sweep(now+int64(2*time.Minute)), "keys:", st.Len())
	// Output:
	// true 1
	// true 0
	// false 0
	// keys: 1
	// swept: 1 keys: 0
}

// Nodes that count locally (delayed synchronization) push their accepted
// requests to a shared store and get the merged state back.
func ExampleStore_Sync() {
	shared := memstore.New(memstore.Options{})
	limit, _ := algorithm.New(algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Minute})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano()

	nodeA := []store.SyncBatch{{Algorithm: limit, Key: "acme", Events: []store.Event{{Time: now, Cost: 30}}}}
	nodeB := []store.SyncBatch{{Algorithm: limit, Key: "acme", Events: []store.Event{{Time: now, Cost: 25}}}}
	_ = shared.Sync(ctx, now, nodeA)
	_ = shared.Sync(ctx, now, nodeB)

	// Node B's view now holds both nodes' 55 units: one more request
	// would leave 44 of the 100.
	d := limit.Peek(nodeB[0].State, now, 1)
	fmt.Println(d.Allowed, d.Remaining)
	// Output:
	// true 44
}
