package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// sharedCall decides reqs (at times nows) in one shared script call, as
// the batcher sends queued decisions.
func sharedCall(t *testing.T, s *Store, nows []int64, reqs []store.Request) []algorithm.Decision {
	t.Helper()
	batch := make([]*pending, len(reqs))
	for i, r := range reqs {
		sp, err := s.specFor(r.Algorithm)
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = &pending{ctx: context.Background(), now: nows[i], req: r, sp: sp, key: s.key(sp, r.Key), done: make(chan struct{})}
	}
	s.decideShared(batch)
	out := make([]algorithm.Decision, len(reqs))
	for i, p := range batch {
		waitAnswered(t, p)
		if p.err != nil {
			t.Fatalf("decision %d of %d in a shared call: %v", i, len(reqs), p.err)
		}
		out[i] = p.d
	}
	return out
}

// waitAnswered waits for p's answer; a batch path that leaves a caller
// waiting fails the test within a minute instead of hanging it.
func waitAnswered(t *testing.T, p *pending) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("a decision in a shared call was never answered (key %s)", p.key)
	}
}

// TestDifferentialShared replays random traces through shared script calls
// (op 'i': several decisions, keys named more than once, each with its own
// time), through op 'd' one decision after another on twin keys, and
// through the Go algorithm, and requires identical decisions, identical
// stored values after every call (see sharedAndAlone), and identical
// states after merges and at the end.
func TestDifferentialShared(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for ci, c := range diffConfigs {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			ref := &goRef{alg: a, states: map[string][]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 11))
			keys := []string{"a", "b", "c", "d"}
			limit := a.Config().Limit
			now := t0
			for step := range 150 {
				if rng.IntN(10) == 0 && c.Algorithm != algorithm.Concurrency {
					key := keys[rng.IntN(len(keys))]
					var evs []store.Event
					for range 1 + rng.IntN(3) {
						at := now - int64(rng.IntN(int(c.Window/time.Millisecond)+1))*int64(time.Millisecond)
						evs = append(evs, store.Event{Time: at, Cost: 1 + rng.Int64N(3)})
						a.Record(ref.state(key), at, evs[len(evs)-1].Cost)
					}
					b := []store.SyncBatch{{Algorithm: a, Key: key, Events: evs}, {Algorithm: a, Key: "twin-" + key, Events: evs}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					if !sameState(a, b[0].State, ref.state(key)) || !sameState(a, b[1].State, ref.state(key)) {
						t.Fatalf("step %d: state after merging %v:\nredis %v\ngo    %v", step, evs, b[0].State, ref.state(key))
					}
				}
				n := 2 + rng.IntN(11)
				nows := make([]int64, n)
				reqs := make([]store.Request, n)
				want := make([]algorithm.Decision, n)
				for i := range n {
					switch r := rng.IntN(100); {
					case r < 3: // the clock steps back
						now -= int64(rng.IntN(200)) * int64(time.Millisecond)
					case r < 8: // a pause
						now += int64(rng.IntN(3000)) * int64(time.Millisecond)
					default:
						now += int64(rng.IntN(int(c.Window/time.Millisecond)/max(int(limit)/2, 1)+1)) * int64(time.Millisecond)
					}
					cost := int64(1)
					switch r := rng.IntN(100); {
					case r < 2:
						cost = 0
					case r < 4:
						cost = limit + 1
					case r < 20:
						cost = 1 + rng.Int64N(min(limit, 4))
					}
					key := keys[rng.IntN(len(keys))]
					nows[i], reqs[i] = now, store.Request{Algorithm: a, Key: key, Cost: cost, Shadow: rng.IntN(10) == 0}
					want[i] = micros(a.Decide(ref.state(key), now, cost))
				}
				got := sharedAndAlone(t, s, nows, reqs)
				for i := range n {
					if got[i] != want[i] {
						t.Fatalf("step %d, decision %d of %d (key %s, cost %d, at +%v):\nredis %+v\ngo    %+v",
							step, i, n, reqs[i].Key, reqs[i].Cost, time.Duration(nows[i]-t0), got[i], want[i])
					}
				}
			}
			for _, key := range keys {
				b := []store.SyncBatch{{Algorithm: a, Key: key}}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				if !sameState(a, b[0].State, ref.state(key)) {
					t.Fatalf("final state of %s:\nredis %v\ngo    %v", key, b[0].State, ref.state(key))
				}
			}
		})
	}
}

// evalshaCalls reads how many EVALSHA calls srv has answered.
func evalshaCalls(t *testing.T, do func(args ...string) (string, error)) int {
	t.Helper()
	info, err := do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}

// TestDecideOneSharesCalls runs many concurrent DecideOne calls on a few
// concurrency keys whose limit they exceed: each key allows exactly its
// limit, as one call per decision would, and Redis answers fewer script
// calls than there are decisions.
func TestDecideOneSharesCalls(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}})
	const limit, keys, workers, each = 300, 4, 48, 40
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: limit})
	before := evalshaCalls(t, srv.Do)
	var mu sync.Mutex
	allowed := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := "k" + strconv.Itoa((w+i)%keys)
				d, err := s.DecideOne(context.Background(), 0, store.Request{Algorithm: a, Key: key, Cost: 1})
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed[key]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k := range keys {
		if got := allowed["k"+strconv.Itoa(k)]; got != limit {
			t.Errorf("key k%d: %d allowed, want exactly %d", k, got, limit)
		}
	}
	calls := evalshaCalls(t, srv.Do) - before
	t.Logf("%d decisions in %d script calls", workers*each, calls)
	if calls >= workers*each {
		t.Errorf("%d decisions took %d script calls: none were shared", workers*each, calls)
	}
}

// TestQueuedDecisionAbandoned shows that a decision whose caller gives up
// while it waits for a shared call is never counted: with Redis paused and
// two calls in flight, a third waits, runs out of time and returns an
// error; once Redis answers again its key was never written.
func TestQueuedDecisionAbandoned(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, Timeout: time.Minute})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Hour})
	srv.Pause()
	var wg sync.WaitGroup
	for range batchInflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.DecideOne(context.Background(), 0, store.Request{Algorithm: a, Key: "busy", Cost: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	sp, err := s.specFor(a)
	if err != nil {
		t.Fatal(err)
	}
	b := s.batcherFor(s.key(sp, "busy"))
	for {
		if b.q.InFlight() == batchInflight {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: "late", Cost: 1})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued decision: err = %v, want a deadline error", err)
	}
	srv.Resume()
	wg.Wait()
	// The batcher has sent (or skipped) everything queued once it has
	// nothing in flight.
	for {
		if b.q.InFlight() == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if n, err := srv.Do("EXISTS", s.key(sp, "late")); err != nil || n != "0" {
		t.Fatalf("EXISTS of the abandoned decision's key = %q, %v; want 0", n, err)
	}
	if n, err := srv.Do("EXISTS", s.key(sp, "busy")); err != nil || n != "1" {
		t.Fatalf("EXISTS of the decided key = %q, %v; want 1", n, err)
	}
}

// TestSharedCallMixedLimits decides requests of three limits, interleaved
// and with keys named more than once, in shared calls, and requires what
// the Go algorithms decide one request after another.
func TestSharedCallMixedLimits(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	algs := []algorithm.Algorithm{
		mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 4, Window: time.Second, Capacity: 3}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 6, Window: time.Second}),
	}
	refs := make([]*goRef, len(algs))
	for i, a := range algs {
		refs[i] = &goRef{alg: a, states: map[string][]int64{}}
	}
	rng := rand.New(rand.NewPCG(3, 5))
	now := t0
	for step := range 60 {
		n := 2 + rng.IntN(20)
		nows := make([]int64, n)
		reqs := make([]store.Request, n)
		want := make([]algorithm.Decision, n)
		for i := range n {
			now += int64(rng.IntN(80)) * int64(time.Millisecond)
			ai := rng.IntN(len(algs))
			key := []string{"x", "y"}[rng.IntN(2)]
			nows[i], reqs[i] = now, store.Request{Algorithm: algs[ai], Key: key, Cost: 1 + rng.Int64N(2)}
			want[i] = micros(algs[ai].Decide(refs[ai].state(key), now, reqs[i].Cost))
		}
		got := sharedCall(t, s, nows, reqs)
		for i := range n {
			if got[i] != want[i] {
				t.Fatalf("step %d, decision %d of %d (%s, key %s):\nredis %+v\ngo    %+v",
					step, i, n, reqs[i].Algorithm.Config().Algorithm, reqs[i].Key, got[i], want[i])
			}
		}
	}
}
