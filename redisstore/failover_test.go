package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestClusterFailover kills a master of a cluster with replicas while
// decisions run. The store must come back once the replica takes over, and
// no key may end up with more counted than was sent; counts only the dead
// master had acknowledged but not yet passed on to its replica may be lost
// (Redis replicates asynchronously), and the test reports how many.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a six-node cluster and waits for a failover")
	}
	cl := redistest.StartClusterWithReplicas(t, time.Second)
	ctx := context.Background()
	st := newStore(t, Options{Addrs: cl.Addrs(), Cluster: true, SlotsPerLimit: 16, Timeout: 300 * time.Millisecond})
	alg := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: algorithm.MaxLimit, Window: time.Hour})

	const nkeys = 48
	type tally struct {
		acked, unknown int64 // allowed answers, and calls that failed (counted or not)
		onVictim       bool  // served by the master that is killed
	}
	keys := make([]string, nkeys)
	tallies := make([]tally, nkeys)
	victim := cl.Owner(cl.Slot(mustKey(t, st, alg, "k0")))
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		tallies[i].onVictim = cl.Owner(cl.Slot(mustKey(t, st, alg, keys[i]))) == victim
	}
	decide := func(i int) error {
		d, err := st.DecideOne(ctx, 0, store.Request{Algorithm: alg, Key: keys[i], Cost: 1})
		switch {
		case err != nil:
			tallies[i].unknown++
		case d.Allowed:
			tallies[i].acked++
		default:
			t.Fatalf("%s rejected under a limit that cannot be reached: %+v", keys[i], d)
		}
		return err
	}

	for round := 0; round < 20; round++ {
		for i := range keys {
			if err := decide(i); err != nil {
				t.Fatalf("before the failover: %v", err)
			}
		}
	}
	killed := time.Now()
	cl.Servers()[victim].Kill()
	// Decide until every key has been answered after the kill, for at most
	// 20 s (the failover itself takes about two node timeouts).
	answered := make([]bool, nkeys)
	left, errs := nkeys, 0
	for left > 0 {
		if time.Since(killed) > 20*time.Second {
			t.Fatalf("%d of %d keys still failing 20s after the master was killed", left, nkeys)
		}
		for i := range keys {
			if decide(i) != nil {
				errs++
				continue
			}
			if !answered[i] {
				answered[i], left = true, left-1
			}
		}
	}
	recovered := time.Since(killed)

	// Read every key's count back (a Sync without events only reads).
	batches := make([]store.SyncBatch, nkeys)
	for i := range keys {
		batches[i] = store.SyncBatch{Algorithm: alg, Key: keys[i]}
	}
	if err := st.Sync(ctx, 0, batches); err != nil {
		t.Fatal(err)
	}
	var lost, victimKeys int64
	for i, b := range batches {
		stored, tl := b.State[1], tallies[i]
		if stored > tl.acked+tl.unknown {
			t.Errorf("%s: %d counted, but only %d allowed and %d unanswered calls were sent", keys[i], stored, tl.acked, tl.unknown)
		}
		if !tl.onVictim && stored < tl.acked {
			t.Errorf("%s (on a master that stayed up): %d counted, %d allowed", keys[i], stored, tl.acked)
		}
		if tl.onVictim {
			victimKeys++
			lost += max(0, tl.acked-stored)
		}
	}
	if victimKeys == 0 {
		t.Fatal("no key was on the killed master; spread the keys over more slots")
	}
	t.Logf("master %d killed: every key answered again after %v (%d failed calls meanwhile); "+
		"%d keys on it, %d allowed requests lost with it", victim, recovered.Round(time.Millisecond), errs, victimKeys, lost)
}

func mustKey(t *testing.T, s *Store, a algorithm.Algorithm, key string) string {
	t.Helper()
	k, err := s.Key(a, key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
