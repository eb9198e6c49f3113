package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// primaryKeys returns names of keys of limit a, in at least minSlots hash
// slots, whose slots the store's map places on primary node, and the index
// in c.Servers() of that primary (checked against the cluster itself).
func primaryKeys(t *testing.T, c *redistest.Cluster, s *Store, a algorithm.Algorithm, node uint16, n, minSlots int) ([]string, int) {
	t.Helper()
	o := s.owners.Load()
	if o == nil {
		t.Fatal("the store has no slot map after connecting")
	}
	sp, err := s.specFor(a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	slots := map[uint16]bool{}
	for i := 0; len(names) < n && i < 100000; i++ {
		name := fmt.Sprint("c", i)
		sl := slot(s.key(sp, name))
		if o.node[sl] == node && (len(slots) < minSlots || slots[sl]) {
			names = append(names, name)
			slots[sl] = true
		}
	}
	if len(names) < n || len(slots) < minSlots {
		t.Fatalf("found %d keys in %d slots on primary %d", len(names), len(slots), node)
	}
	return names, c.Owner(int(slot(s.key(sp, names[0]))))
}

// TestClusterSharedCallOnOnePrimary decides batches of keys of two limits
// spread over several hash slots of one primary: each batch is one script
// call on that primary and none elsewhere, and every decision and final
// state equals the Go algorithm's, one decision after another.
func TestClusterSharedCallOnOnePrimary(t *testing.T) {
	c := sharedCluster(t)
	s := newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true, SlotsPerLimit: 64})
	fixed := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second})
	blog := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 7, Window: time.Second})
	refs := map[algorithm.Algorithm]*goRef{fixed: {alg: fixed, states: map[string][]int64{}}, blog: {alg: blog, states: map[string][]int64{}}}
	fk, owner := primaryKeys(t, c, s, fixed, 1, 6, 4)
	bk, owner2 := primaryKeys(t, c, s, blog, 1, 6, 4)
	if owner != owner2 {
		t.Fatalf("primary 1 of the map is servers %d and %d", owner, owner2)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	now := t0
	for round := range 40 {
		n := 2 + rng.IntN(10)
		nows := make([]int64, n)
		reqs := make([]store.Request, n)
		want := make([]algorithm.Decision, n)
		for i := range n {
			now += int64(rng.IntN(150)) * int64(time.Millisecond)
			a, keys := fixed, fk
			if rng.IntN(2) == 0 {
				a, keys = blog, bk
			}
			key := keys[rng.IntN(len(keys))] // sometimes named twice in one call
			cost := 1 + rng.Int64N(3)
			nows[i], reqs[i] = now, store.Request{Algorithm: a, Key: key, Cost: cost}
			want[i] = micros(a.Decide(refs[a].state(key), now, cost))
		}
		before := make([]int, len(c.Servers()))
		for i, srv := range c.Servers() {
			before[i] = evalshaCalls(t, srv.Do)
		}
		got := sharedCall(t, s, nows, reqs)
		for i := range n {
			if got[i] != want[i] {
				t.Fatalf("round %d, decision %d of %d (%s %s, cost %d): redis %+v, go %+v", round, i, n, reqs[i].Algorithm.Config().Algorithm, reqs[i].Key, reqs[i].Cost, got[i], want[i])
			}
		}
		for i, srv := range c.Servers() {
			calls, wantCalls := evalshaCalls(t, srv.Do)-before[i], 0
			if i == owner {
				wantCalls = 1
			}
			if calls != wantCalls {
				t.Fatalf("round %d: server %d answered %d script calls for a batch of %d decisions on server %d, want %d", round, i, calls, n, owner, wantCalls)
			}
		}
	}
	for a, ref := range refs {
		for key, st := range ref.states {
			b := []store.SyncBatch{{Algorithm: a, Key: key}}
			if err := s.Sync(context.Background(), now, b); err != nil {
				t.Fatal(err)
			}
			if !sameState(a, b[0].State, st) {
				t.Fatalf("final state of %s: redis %v, go %v", key, b[0].State, st)
			}
		}
	}
}

// TestClusterStaleSlotMap gives the store a slot map that places every slot
// on one primary while a batch's keys live on others too: that primary
// refuses the call before counting anything, the batch is decided slot by
// slot instead, and every key is counted exactly once.
func TestClusterStaleSlotMap(t *testing.T) {
	c := sharedCluster(t)
	s := newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true, SlotsPerLimit: 64})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Hour})
	ref := &goRef{alg: a, states: map[string][]int64{}}
	on1, _ := primaryKeys(t, c, s, a, 1, 3, 2)
	on2, _ := primaryKeys(t, c, s, a, 2, 3, 2)
	keys := append(on1, on2...)
	real := s.owners.Load()
	wrong := &owners{read: time.Now(), clients: real.clients}
	for sl := range wrong.node {
		wrong.node[sl] = 1
	}
	now := t0
	for round := range 5 {
		s.owners.Store(wrong)
		s.ownersTried.Store(time.Now().UnixNano()) // no refresh in between
		nows := make([]int64, len(keys))
		reqs := make([]store.Request, len(keys))
		want := make([]algorithm.Decision, len(keys))
		for i, k := range keys {
			nows[i], reqs[i] = now, store.Request{Algorithm: a, Key: k, Cost: 1}
			want[i] = micros(a.Decide(ref.state(k), now, 1))
		}
		got := sharedCall(t, s, nows, reqs)
		for i := range keys {
			if got[i] != want[i] {
				t.Fatalf("round %d, key %s: redis %+v, go %+v", round, keys[i], got[i], want[i])
			}
		}
		if s.owners.Load() == wrong {
			t.Fatalf("round %d: the refused call left the wrong slot map in place", round)
		}
	}
}

// TestClusterPausedPrimaryHoldsOnlyItsKeys pauses one primary while its
// keys' decisions wait on it: decisions of keys on the other primaries go
// on being answered, since each primary's decisions share calls only among
// themselves.
func TestClusterPausedPrimaryHoldsOnlyItsKeys(t *testing.T) {
	c := redistest.StartCluster(t)
	s := newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, SlotsPerLimit: 64, Timeout: time.Minute})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1000, Window: time.Hour})
	held, srv := primaryKeys(t, c, s, a, 1, 4, 2)
	free2, _ := primaryKeys(t, c, s, a, 2, 10, 4)
	free3, _ := primaryKeys(t, c, s, a, 3, 10, 4)
	c.Servers()[srv].Pause()
	defer c.Servers()[srv].Resume()
	hctx, hcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, k := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.DecideOne(hctx, 0, store.Request{Algorithm: a, Key: k, Cost: 1})
		}()
	}
	// Let the held decisions reach the paused primary's batcher.
	for s.batcherFor(mustKey(t, s, a, held[0])).q.InFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fwg sync.WaitGroup
	errs := make(chan error, 2*len(free2))
	for _, k := range append(free2, free3...) {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			if d, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: k, Cost: 1}); err != nil || !d.Allowed {
				errs <- fmt.Errorf("key %s on a running primary: %+v, %v", k, d, err)
			}
		}()
	}
	fwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	hcancel()
	c.Servers()[srv].Resume()
	wg.Wait()
}
