package floodgate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
)

// A per-client limit: each client gets 3 requests a minute, counted apart.
func Example() {
	lim, err := floodgate.New(floodgate.Limit{Limit: 3, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, client := range []string{"acme", "acme", "acme", "acme", "globex"} {
		d, err := lim.Allow(ctx, client)
		if err != nil {
			panic(err) // the in-memory store never fails; a Redis store can
		}
		if !d.Allowed {
			fmt.Printf("%s: rejected (%s), %d remaining\n", client, d.Reason.Message(), d.Remaining)
			continue
		}
		fmt.Printf("%s: allowed, %d remaining\n", client, d.Remaining)
	}
	// Output:
	// acme: allowed, 2 remaining
	// acme: allowed, 1 remaining
	// acme: allowed, 0 remaining
	// acme: rejected (over limit), 0 remaining
	// globex: allowed, 2 remaining
}

// Requests can cost more than one unit: here a limit of 1000 units a second
// on bytes uploaded, with a cost per upload.
func ExampleLimiter_AllowN() {
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 1000, Window: time.Second},
		floodgate.WithClock(func() time.Time { return time.Unix(100, 0) }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, size := range []int64{600, 500, 400, 1200} {
		d, _ := lim.AllowN(ctx, "uploader", size)
		if d.Allowed {
			fmt.Printf("%d bytes: allowed, %d remaining\n", size, d.Remaining)
		} else {
			fmt.Printf("%d bytes: rejected, %d remaining: %s\n", size, d.Remaining, d.Reason.Message())
		}
	}
	// Output:
	// 600 bytes: allowed, 400 remaining
	// 500 bytes: rejected, 400 remaining: over limit
	// 400 bytes: allowed, 0 remaining
	// 1200 bytes: rejected, 0 remaining: cost exceeds limit: this request can never be accepted
}

// The leaky bucket throttles instead of rejecting: each request is let
// through one interval after the one before, and Throttle sleeps for the delay.
// Here 100 requests a second means one every 10ms, and a request that would
// wait more than 25ms is rejected. (The clock is frozen so that the printed
// delays do not depend on how fast the example runs; Throttle still sleeps.)
func ExampleLimiter_Throttle() {
	frozen := time.Unix(1_700_000_000, 0)
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.LeakyBucket, Limit: 100, Window: time.Second,
		MaxDelay: 25 * time.Millisecond}, floodgate.WithClock(func() time.Time { return frozen }))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, err := lim.Throttle(ctx, "worker", 1)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			fmt.Println("went after", d.Delay)
		} else {
			fmt.Println("rejected:", d.Reason.Message())
		}
	}
	// Output:
	// went after 0s
	// went after 10ms
	// went after 20ms
	// rejected: queue full
}

// A concurrency limit hands out leases: each allowed request's slot comes
// back when its Lease is released, once, and only by that Lease.
func ExampleLimiter_Acquire() {
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 2})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var leases []*floodgate.Lease
	for i := range 3 {
		l, _ := lim.Acquire(ctx, "db", 1)
		fmt.Printf("request %d: allowed=%v in flight room=%d\n", i+1, l.Decision.Allowed, l.Decision.Remaining)
		leases = append(leases, l)
	}
	fmt.Println("release request 1:", leases[0].Release(ctx)) // request 1 ended
	fmt.Println("release it again:", leases[0].Release(ctx))
	l, _ := lim.Acquire(ctx, "db", 1)
	fmt.Printf("request 4: allowed=%v\n", l.Decision.Allowed)
	// Output:
	// request 1: allowed=true in flight room=1
	// request 2: allowed=true in flight room=0
	// request 3: allowed=false in flight room=0
	// release request 1: <nil>
	// release it again: floodgate: the lease holds nothing: released already, or expired
	// request 4: allowed=true
}

// A virtual clock makes the limiter's decisions reproducible: tests and the
// simulator move time forward themselves.
func ExampleWithClock() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.TokenBucket, Limit: 60, Window: time.Minute,
		Capacity: 2}, floodgate.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	show := func() {
		d, _ := lim.Allow(ctx, "k")
		fmt.Printf("allowed=%v retry after %v\n", d.Allowed, d.RetryAfter)
	}
	show()
	show()
	show() // the bucket of 2 is empty; one token comes back each second
	now = now.Add(400 * time.Millisecond)
	show()
	now = now.Add(600 * time.Millisecond)
	show()
	// Output:
	// allowed=true retry after 0s
	// allowed=true retry after 0s
	// allowed=false retry after 1s
	// allowed=false retry after 600ms
	// allowed=true retry after 0s
}

// Limiters can share one store. A key's counter is shared only by limiters
// with equal Limits, so two routes with the same limit count a client
// together, while a route with another limit counts apart.
func ExampleWithStore() {
	st := memstore.New(memstore.Options{MaxKeys: 100_000})
	limit := floodgate.Limit{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Minute}
	search, _ := floodgate.New(limit, floodgate.WithStore(st))
	browse, _ := floodgate.New(limit, floodgate.WithStore(st))
	limit.Limit = 10
	export, _ := floodgate.New(limit, floodgate.WithStore(st))

	ctx := context.Background()
	for _, l := range []*floodgate.Limiter{search, browse, browse, export} {
		d, _ := l.Allow(ctx, "client-7")
		fmt.Println(d.Allowed, d.Remaining)
	}
	fmt.Println("keys tracked:", st.Len())
	// Output:
	// true 1
	// true 0
	// false 0
	// true 9
	// keys tracked: 2
}
