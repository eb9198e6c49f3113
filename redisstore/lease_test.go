package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

var ctx = context.Background()

// fixedClock returns a clock frozen at t and a function that moves it.
func fixedClock(t time.Time) (func() time.Time, func(time.Duration)) {
	var mu sync.Mutex
	return func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return t
		}, func(d time.Duration) {
			mu.Lock()
			t = t.Add(d)
			mu.Unlock()
		}
}

// leaseStores are the stores a concurrency limit's leases must behave the
// same in: memory, and a real redis-server.
func leaseStores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memory": func(t *testing.T) store.Store { return memstore.New(memstore.Options{}) },
		"redis": func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// A concurrency slot comes back only by its own lease, once: a second
// Release changes nothing, in both stores.
func TestLeaseReleasedOnce(t *testing.T) {
	for name, mk := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			now, advance := fixedClock(time.Unix(1_764_000_000, 0))
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 2, Window: time.Minute},
				floodgate.WithStore(mk(t)), floodgate.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			var held []*floodgate.Lease
			for i, want := range []bool{true, true, false} {
				l, err := lim.Acquire(ctx, "db", 1)
				if err != nil || l.Decision.Allowed != want {
					t.Fatalf("acquire %d: %+v %v, want allowed %v", i+1, l, err, want)
				}
				held = append(held, l)
			}
			if err := held[2].Release(ctx); err != nil {
				t.Fatalf("releasing a rejected request's lease: %v", err)
			}
			if l, _ := lim.Acquire(ctx, "db", 1); l.Decision.Allowed {
				t.Fatal("releasing a rejected request's lease freed a slot")
			}
			if err := held[0].Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := held[0].Release(ctx); !errors.Is(err, floodgate.ErrLeaseNotHeld) {
				t.Fatalf("second release: %v, want ErrLeaseNotHeld", err)
			}
			advance(time.Second)
			if l, _ := lim.Acquire(ctx, "db", 1); !l.Decision.Allowed {
				t.Fatal("the released slot is not free")
			}
			if l, _ := lim.Acquire(ctx, "db", 1); l.Decision.Allowed {
				t.Fatal("the double release freed a second slot")
			}
		})
	}
}

// A holder that never releases (it crashed) loses its slot when the lease
// expires, although other requests keep the key busy, in both stores.
func TestLeaseExpires(t *testing.T) {
	for name, mk := range leaseStores(t) {
		t.Run(name, func(t *testing.T) {
			now, advance := fixedClock(time.Unix(1_764_000_000, 0))
			lim, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.Concurrency, Limit: 2, Window: 10 * time.Second},
				floodgate.WithStore(mk(t)), floodgate.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			crashed, err := lim.Acquire(ctx, "db", 1)
			if err != nil || !crashed.Decision.Allowed {
				t.Fatalf("first acquire: %+v %v", crashed, err)
			}
			for s := 1; s < 10; s++ {
				advance(time.Second)
				l, err := lim.Acquire(ctx, "db", 1)
				if err != nil || !l.Decision.Allowed {
					t.Fatalf("at %ds the free slot: %+v %v", s, l, err)
				}
				if other, _ := lim.Acquire(ctx, "db", 1); other.Decision.Allowed {
					t.Fatalf("at %ds the crashed holder's slot came back early", s)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			advance(time.Second) // 10s after the crashed holder acquired
			a, _ := lim.Acquire(ctx, "db", 1)
			b, _ := lim.Acquire(ctx, "db", 1)
			if !a.Decision.Allowed || !b.Decision.Allowed {
				t.Fatal("the crashed holder's lease did not expire")
			}
			if err := crashed.Release(ctx); !errors.Is(err, floodgate.ErrLeaseNotHeld) {
				t.Fatalf("releasing an expired lease: %v, want ErrLeaseNotHeld", err)
			}
			if c, _ := lim.Acquire(ctx, "db", 1); c.Decision.Allowed {
				t.Fatal("releasing the expired lease freed someone else's slot")
			}
		})
	}
}
