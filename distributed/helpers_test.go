package distributed

import (
	"context"
	"errors"
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

func mustNode(t testing.TB, o Options) *Node {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}
