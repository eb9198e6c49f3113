package distributed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// errDown is what a faultStore answers while it is down.
var errDown = errors.New("connection refused (fault injected)")

// faultStore is a real memory store behind a switch that makes it fail or
// stall, and counts the calls that reach it. It stands for the network and
// process faults the Redis tests inject for real.
type faultStore struct {
	mu    sync.Mutex
	inner *memstore.Store
	down  bool
	stall chan struct{} // non-nil: calls block, ignoring their context, until it is closed
	// roundTrip is how long each call takes before it is answered: under
	// testing/synctest, a round trip of a known length on the bubble's clock.
	roundTrip time.Duration

	calls atomic.Int64 // calls that reached the store (successful or not)
}

func newFaultStore() *faultStore { return &faultStore{inner: memstore.New(memstore.Options{})} }

func (f *faultStore) setDown(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

// startStall makes calls hang until endStall.
func (f *faultStore) startStall() { f.mu.Lock(); f.stall = make(chan struct{}); f.mu.Unlock() }

func (f *faultStore) endStall() {
	f.mu.Lock()
	if f.stall != nil {
		close(f.stall)
		f.stall = nil
	}
	f.mu.Unlock()
}

// wipe replaces the data with an empty store, as a restart without
// persistence does.
func (f *faultStore) wipe() { f.mu.Lock(); f.inner = memstore.New(memstore.Options{}); f.mu.Unlock() }

func (f *faultStore) enter() (*memstore.Store, error) {
	f.calls.Add(1)
	f.mu.Lock()
	down, stall, inner, roundTrip := f.down, f.stall, f.inner, f.roundTrip
	f.mu.Unlock()
	if roundTrip > 0 {
		time.Sleep(roundTrip)
	}
	if stall != nil {
		<-stall
	}
	if down {
		return nil, errDown
	}
	return inner, nil
}

func (f *faultStore) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	s, err := f.enter()
	if err != nil {
		return err
	}
	return s.Decide(ctx, now, reqs, out)
}

func (f *faultStore) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	s, err := f.enter()
	if err != nil {
		return algorithm.Decision{}, err
	}
	return s.DecideOne(ctx, now, req)
}

func (f *faultStore) Release(ctx context.Context, now int64, reqs []store.Request) error {
	s, err := f.enter()
	if err != nil {
		return err
	}
	return s.Release(ctx, now, reqs)
}

func (f *faultStore) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	s, err := f.enter()
	if err != nil {
		return err
	}
	return s.Sync(ctx, now, batches)
}

func (f *faultStore) Heartbeat(ctx context.Context, now int64, b store.Beat) (store.Census, error) {
	s, err := f.enter()
	if err != nil {
		return store.Census{}, err
	}
	return s.Heartbeat(ctx, now, b)
}

// vclock is a virtual clock safe for concurrent reads.
type vclock struct{ ns atomic.Int64 }

func newVClock() *vclock {
	c := &vclock{}
	c.ns.Store(time.Date(2026, 7, 30, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *vclock) Now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *vclock) Add(d time.Duration) int64 { return c.ns.Add(int64(d)) }
func (c *vclock) NS() int64                 { return c.ns.Load() }

func mustAlg(t testing.TB, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatalf("algorithm.New(%+v): %v", c, err)
	}
	return a
}

func mustNode(t testing.TB, o Options) *Node {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// sharedCount returns the count the shared store holds for key under alg,
// read with an empty sync. It tries three times: right after a Redis
// restart the client's first call may meet a connection the old process
// closed.
func sharedCount(t testing.TB, s store.Syncer, alg algorithm.Algorithm, key string, now int64) int64 {
	t.Helper()
	var err error
	for try := 0; try < 3; try++ {
		b := []store.SyncBatch{{Algorithm: alg, Key: key}}
		if err = s.Sync(context.Background(), now, b); err == nil {
			return used(alg, b[0].State, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reading the shared count: %v", err)
	return 0
}

// busiest returns the largest number of times within any window-long
// interval (t_i - t_j < window).
func busiest(times []int64, window time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for times[i]-times[j] >= int64(window) {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// keyFlood is a flood of new keys, one hit each, sent by several workers.
type keyFlood struct {
	keys    [][]string // the keys each worker sent
	allowed atomic.Int64
}

// startKeyFlood starts workers that each send calls of perCall new keys
// (prefix + "wW/cC/kI") under rule until stop; wg waits for them.
func startKeyFlood(t *testing.T, n *Node, rule algorithm.Algorithm, prefix string, workers, perCall int, stop time.Time, wg *sync.WaitGroup) *keyFlood {
	f := &keyFlood{keys: make([][]string, workers)}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]store.Request, perCall)
			out := make([]algorithm.Decision, perCall)
			for c := 0; time.Now().Before(stop); c++ {
				for i := range reqs {
					k := fmt.Sprintf("%sw%d/c%d/k%d", prefix, w, c, i)
					f.keys[w] = append(f.keys[w], k)
					reqs[i] = store.Request{Algorithm: rule, Key: k, Cost: 1}
				}
				if err := n.Decide(ctx, time.Now().UnixNano(), reqs, out); err != nil {
					t.Error(err)
					return
				}
				for _, o := range out {
					if o.Allowed {
						f.allowed.Add(1)
					}
				}
			}
		}()
	}
	return f
}

// all returns every key the flood sent.
func (f *keyFlood) all() []string {
	var all []string
	for _, ks := range f.keys {
		all = append(all, ks...)
	}
	return all
}
