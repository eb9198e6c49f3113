package memtable

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

var ctx = context.Background()

const sec = int64(time.Second)

func decide(t testing.TB, s *Store, a algorithm.Algorithm, key string, now, cost int64) algorithm.Decision {
	t.Helper()
	d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecideOneCountsPerKey(t *testing.T) {
	s := New(Options{})
	c := newCounter(3, time.Minute, 2)
	now := 100 * sec
	for i := range 3 {
		if d := decide(t, s, c, "a", now, 1); !d.Allowed || d.Remaining != int64(2-i) {
			t.Fatalf("request %d: %+v, want allowed with %d remaining", i, d, 2-i)
		}
	}
	if d := decide(t, s, c, "a", now, 1); d.Allowed {
		t.Fatalf("4th request of limit 3 allowed: %+v", d)
	}
	if d := decide(t, s, c, "b", now, 3); !d.Allowed {
		t.Fatalf("other key shares state with a: %+v", d)
	}
	if d := decide(t, s, c, "a", now+int64(time.Minute), 1); !d.Allowed {
		t.Fatalf("next window still rejects: %+v", d)
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
}

func TestRejectedFirstRequestStoresNothing(t *testing.T) {
	s := New(Options{})
	c := newCounter(3, time.Minute, 2)
	if d := decide(t, s, c, "a", sec, 4); d.Allowed {
		t.Fatalf("cost 4 over limit 3 allowed: %+v", d)
	}
	if d := decide(t, s, c, "b", sec, 0); d.Allowed || d.Reason != algorithm.ReasonBadCost {
		t.Fatalf("cost 0: %+v", d)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("Len = %d after only rejected first requests, want 0", got)
	}
}

// uncomparable is an algorithm whose dynamic type cannot be compared with
// ==; the store must still work with it (without caching it).
type uncomparable struct {
	*counter
	tags []string
}

func TestStateIdentityIsConfigAndKey(t *testing.T) {
	s := New(Options{})
	now := 5 * sec
	a1 := newCounter(2, time.Minute, 2)
	a2 := newCounter(2, time.Minute, 2) // a reloaded rule: new value, same Config
	b := newCounter(5, time.Minute, 2)  // another Config, same key
	u := uncomparable{counter: newCounter(2, time.Minute, 2), tags: []string{"x"}}

	decide(t, s, a1, "k", now, 2)
	if d := decide(t, s, a2, "k", now, 1); d.Allowed {
		t.Fatalf("equal Config did not share the counter: %+v", d)
	}
	if d := decide(t, s, u, "k", now, 1); d.Allowed {
		t.Fatalf("equal Config (uncomparable algorithm) did not share the counter: %+v", d)
	}
	if d := decide(t, s, b, "k", now, 5); !d.Allowed {
		t.Fatalf("different Config shared the counter: %+v", d)
	}
}

type liar struct{ *counter }

func (l liar) Words() int { return l.counter.Words() + 1 }

func TestBadRequests(t *testing.T) {
	s := New(Options{})
	c := newCounter(3, time.Minute, 2)
	if _, err := s.DecideOne(ctx, 0, store.Request{Key: "a", Cost: 1}); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("DecideOne without algorithm: err = %v", err)
	}
	reqs := []store.Request{{Algorithm: c, Key: "a", Cost: 1}, {Key: "b", Cost: 1}}
	if err := s.Decide(ctx, 0, reqs, make([]algorithm.Decision, 2)); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("Decide with a nil algorithm: err = %v", err)
	}
	if err := s.Decide(ctx, 0, reqs, make([]algorithm.Decision, 1)); !errors.Is(err, store.ErrOutLength) {
		t.Fatalf("Decide with short out: err = %v", err)
	}
	if err := s.Release(ctx, 0, reqs); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("Release with a nil algorithm: err = %v", err)
	}
	if err := s.Sync(ctx, 0, []store.SyncBatch{{Key: "a"}}); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("Sync with a nil algorithm: err = %v", err)
	}
	decide(t, s, c, "a", 0, 1)
	if _, err := s.DecideOne(ctx, 0, store.Request{Algorithm: liar{c}, Key: "a", Cost: 1}); err == nil {
		t.Fatal("an algorithm reporting another word count for a known Config was accepted")
	}
}

func TestDecideOneAllocatesNothingForKnownKey(t *testing.T) {
	s := New(Options{})
	c := newCounter(1<<40, time.Hour, 2)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", i)
		decide(t, s, c, keys[i], sec, 1)
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		_, _ = s.DecideOne(ctx, sec, store.Request{Algorithm: c, Key: keys[i%len(keys)], Cost: 1})
		i++
	})
	if allocs != 0 {
		t.Fatalf("DecideOne on a known key allocates %v times", allocs)
	}
}

func TestDecideAllocatesNothingForKnownKeys(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	s := New(Options{})
	a := newCounter(1<<40, time.Hour, 2)
	b := newCounter(1<<40, time.Hour, 5)
	reqs := []store.Request{{Algorithm: a, Key: "x", Cost: 1}, {Algorithm: b, Key: "y", Cost: 1}, {Algorithm: a, Key: "z", Cost: 1}}
	out := make([]algorithm.Decision, len(reqs))
	if err := s.Decide(ctx, sec, reqs, out); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(500, func() { _ = s.Decide(ctx, sec, reqs, out) }); n != 0 {
		t.Fatalf("Decide of 3 known keys allocates %v times", n)
	}
}

func TestDecideIsAllOrNothing(t *testing.T) {
	s := New(Options{})
	small := newCounter(1, time.Minute, 2)
	big := newCounter(10, time.Minute, 3)
	now := sec
	decide(t, s, small, "full", now, 1) // "full" is now at its limit

	out := make([]algorithm.Decision, 2)
	reqs := []store.Request{
		{Algorithm: big, Key: "u", Cost: 4},
		{Algorithm: small, Key: "full", Cost: 1},
	}
	if err := s.Decide(ctx, now, reqs, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("decisions %+v, want allowed then rejected", out)
	}
	if n := count(t, s, big, "u", now); n != 0 {
		t.Fatalf("a rejected Decide counted %d units on its allowed request", n)
	}

	// The same rejection as Shadow does not stop the others, and is not
	// counted itself.
	reqs[1].Shadow = true
	if err := s.Decide(ctx, now, reqs, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("decisions %+v, want allowed then rejected (shadow)", out)
	}
	if n := count(t, s, big, "u", now); n != 4 {
		t.Fatalf("shadow rejection: u counted %d, want 4", n)
	}
	if n := count(t, s, small, "full", now); n != 1 {
		t.Fatalf("rejected shadow request counted: full = %d, want 1", n)
	}

	// A shadow request that is allowed is counted.
	reqs = []store.Request{
		{Algorithm: big, Key: "u", Cost: 1},
		{Algorithm: small, Key: "fresh", Cost: 1, Shadow: true},
	}
	if err := s.Decide(ctx, now, reqs, out); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, small, "fresh", now); n != 1 {
		t.Fatalf("allowed shadow request counted %d, want 1", n)
	}

	// Two requests on the same limit and key see each other: 5+5 of the
	// remaining 5 cannot both pass.
	reqs = []store.Request{
		{Algorithm: big, Key: "u", Cost: 5},
		{Algorithm: big, Key: "u", Cost: 5},
	}
	if err := s.Decide(ctx, now, reqs, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("duplicate key decisions %+v, want allowed then rejected", out)
	}
	if n := count(t, s, big, "u", now); n != 5 {
		t.Fatalf("after a rejected duplicate, u = %d, want 5 (unchanged)", n)
	}
	reqs[0].Cost, reqs[1].Cost = 2, 1
	if err := s.Decide(ctx, now, reqs, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Allowed || !out[1].Allowed || out[1].Remaining != 2 {
		t.Fatalf("duplicate key decisions %+v, want both allowed, 2 remaining", out)
	}
	if n := count(t, s, big, "u", now); n != 8 {
		t.Fatalf("u = %d, want 5+2+1 = 8", n)
	}
}

func TestDecideDuplicateCommit(t *testing.T) {
	s := New(Options{})
	c := newCounter(10, time.Minute, 2)
	out := make([]algorithm.Decision, 3)
	reqs := []store.Request{
		{Algorithm: c, Key: "u", Cost: 2},
		{Algorithm: c, Key: "v", Cost: 1},
		{Algorithm: c, Key: "u", Cost: 3},
	}
	if err := s.Decide(ctx, sec, reqs, out); err != nil {
		t.Fatal(err)
	}
	for i, d := range out {
		if !d.Allowed {
			t.Fatalf("request %d rejected: %+v", i, d)
		}
	}
	if out[2].Remaining != 5 {
		t.Fatalf("second request on u sees remaining %d, want 5", out[2].Remaining)
	}
	if u, v := count(t, s, c, "u", sec), count(t, s, c, "v", sec); u != 5 || v != 1 {
		t.Fatalf("u=%d v=%d, want 5 and 1", u, v)
	}
}

// TestDecideAtomicUnderConcurrency runs multi-key decisions concurrently, in
// both key orders (a lock-order bug would deadlock), and checks that every
// allowed decision was counted on both keys and nothing else was.
func TestDecideAtomicUnderConcurrency(t *testing.T) {
	s := New(Options{Shards: 8})
	a := newCounter(300, time.Hour, 2)
	b := newCounter(1<<40, time.Hour, 2)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]algorithm.Decision, 2)
			reqs := []store.Request{{Algorithm: a, Key: "x", Cost: 1}, {Algorithm: b, Key: "y", Cost: 1}}
			if g%2 == 1 {
				reqs[0], reqs[1] = reqs[1], reqs[0]
			}
			n := 0
			for range 200 {
				if err := s.Decide(ctx, sec, reqs, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed && out[1].Allowed {
					n++
				}
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if allowed != 300 {
		t.Fatalf("%d pairs allowed, want exactly the limit 300", allowed)
	}
	if x, y := count(t, s, a, "x", sec), count(t, s, b, "y", sec); x != 300 || y != 300 {
		t.Fatalf("x=%d y=%d, want both 300: a rejected pair was partly counted", x, y)
	}
}

func TestRelease(t *testing.T) {
	s := New(Options{})
	c := newCounter(2, time.Hour, 2)
	decide(t, s, c, "k", sec, 2)
	if d := decide(t, s, c, "k", sec, 1); d.Allowed {
		t.Fatalf("over limit allowed: %+v", d)
	}
	if err := s.Release(ctx, sec, []store.Request{{Algorithm: c, Key: "k", Cost: 1}, {Algorithm: c, Key: "unknown", Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if d := decide(t, s, c, "k", sec, 1); !d.Allowed {
		t.Fatalf("released unit not given back: %+v", d)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Release of an unknown key created it: Len = %d", got)
	}
}

func TestSyncMergesEvents(t *testing.T) {
	s := New(Options{})
	c := newCounter(100, time.Minute, 4)
	now := 10 * sec
	// Node 1 and node 2 each push events; each gets back the merged state.
	b1 := []store.SyncBatch{{Algorithm: c, Key: "k", Events: []store.Event{{Time: now, Cost: 3}, {Time: now, Cost: 2}}}}
	if err := s.Sync(ctx, now, b1); err != nil {
		t.Fatal(err)
	}
	b2 := []store.SyncBatch{
		{Algorithm: c, Key: "k", Events: []store.Event{{Time: now, Cost: 7}}, State: make([]int64, 1, 8)},
		{Algorithm: c, Key: "empty"},
	}
	if err := s.Sync(ctx, now, b2); err != nil {
		t.Fatal(err)
	}
	if _, n := c.view(b1[0].State, now); n != 5 {
		t.Fatalf("node 1 sees %d after its sync, want 5", n)
	}
	if len(b2[0].State) != 4 {
		t.Fatalf("State has length %d, want Words() = 4", len(b2[0].State))
	}
	for i, w := range b2[0].State[1:] {
		if w != 12 {
			t.Fatalf("state word %d = %d, want 12 (whole state copied out)", i+1, w)
		}
	}
	if len(b2[1].State) != 4 || !allZero(b2[1].State) {
		t.Fatalf("unknown key read back %v, want 4 zero words", b2[1].State)
	}
	if s.Len() != 1 {
		t.Fatalf("an event-less Sync created a key: Len = %d", s.Len())
	}
	// The merged count limits decisions made on the store.
	if d := decide(t, s, c, "k", now, 89); d.Allowed {
		t.Fatalf("decision ignores synced counts: %+v", d)
	}
}

func TestIdleKeysExpire(t *testing.T) {
	s := New(Options{Shards: 4})
	c := newCounter(10, time.Second, 2)
	t0 := 1000 * sec
	for i := range 5000 {
		decide(t, s, c, fmt.Sprint("old-", i), t0, 1)
	}
	// Keys kept busy must survive whatever reclaims the idle ones.
	later := t0 + 3*sec
	decide(t, s, c, "busy", t0, 4)
	decide(t, s, c, "busy", t0+sec/2, 1)
	decide(t, s, c, "busy", later-sec/4, 1)
	// New keys arriving later reclaim idle ones as they are inserted: the
	// store stays far below old+new.
	for i := range 5000 {
		decide(t, s, c, fmt.Sprint("new-", i), later, 1)
	}
	if got := s.Len(); got > 6000 {
		t.Fatalf("Len = %d after 5000 idle and 5000 new keys: idle keys not reclaimed on insert", got)
	}
	// Sweep drops the rest of the idle keys, and only those.
	far := later + 3*sec
	decide(t, s, c, "busy", far, 1)
	n := s.Sweep(far)
	if got := s.Len(); got != 1 {
		t.Fatalf("Len = %d after Sweep (dropped %d), want only the busy key", got, n)
	}
	if got := count(t, s, c, "busy", far); got != 1 {
		t.Fatalf("busy key count = %d, want 1", got)
	}
}

func TestNotIdleKeysSurviveSweep(t *testing.T) {
	s := New(Options{Shards: 2})
	c := newCounter(100, 10*time.Second, 2)
	t0 := 50 * sec
	for i := range 1000 {
		decide(t, s, c, fmt.Sprint(i), t0, 7)
	}
	// Time runs backwards for one caller: nothing may expire or reset.
	if n := s.Sweep(t0 - 100*sec); n != 0 {
		t.Fatalf("Sweep with an earlier clock dropped %d keys", n)
	}
	if n := s.Sweep(t0 + 9*sec); n != 0 {
		t.Fatalf("Sweep before IdleAfter dropped %d keys", n)
	}
	for i := range 1000 {
		if got := count(t, s, c, fmt.Sprint(i), t0); got != 7 {
			t.Fatalf("key %d: count %d, want 7", i, got)
		}
	}
	if n := s.Sweep(t0 + 11*sec); n != 1000 {
		t.Fatalf("Sweep after IdleAfter dropped %d keys, want 1000", n)
	}
}

func TestMaxKeysBoundsMemory(t *testing.T) {
	const maxKeys = 1024
	s := New(Options{Shards: 4, MaxKeys: maxKeys})
	if s.MaxKeys() != maxKeys {
		t.Fatalf("MaxKeys() = %d, want %d", s.MaxKeys(), maxKeys)
	}
	c := newCounter(1<<40, 1000*time.Hour, 2) // nothing expires during the test
	now := sec
	var before, after runtime.MemStats
	decide(t, s, c, "hot", now, 1)
	for i := range 100_000 {
		now += int64(100 * time.Millisecond) // distinct last-use ticks
		decide(t, s, c, fmt.Sprint("flood-", i), now, 1)
		if i%10 == 0 {
			decide(t, s, c, "hot", now, 1)
		}
		if i == 10_000 {
			runtime.GC()
			runtime.ReadMemStats(&before)
		}
		if got := s.Len(); i%1000 == 0 && got > maxKeys {
			t.Fatalf("Len = %d > MaxKeys %d after %d distinct keys", got, maxKeys, i+1)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Len(); got > maxKeys || got < maxKeys*3/4 {
		t.Fatalf("Len = %d, want near but not over %d", got, maxKeys)
	}
	if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 256<<10 {
		t.Fatalf("heap grew %d bytes while 90,000 more distinct keys arrived at a full store", grow)
	}
	// The hot key was used recently all along, so sampled-LRU eviction
	// kept it and its count.
	if got := count(t, s, c, "hot", now); got != 10_001 {
		t.Fatalf("hot key count = %d, want 10001: a recently used key was evicted", got)
	}
}

// TestTableMatchesModel drives one table with random inserts, lookups and
// removals, using hashes with few distinct home bits so probe runs are long
// and wrap around, and states of every length (inline, out of line, back),
// and checks it against a map after every step.
func TestTableMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		sh := &shard{maxKeys: 1 << 30, maxBytes: -1, rng: 1}
		c := newCounter(1<<40, time.Hour, 9)
		l := &limit{id: 0, words: 9, alg: c}
		tb := sh.table(l)
		model := map[uint64][]int64{}
		var keys []uint64
		for step := range 3000 {
			h := r.Uint64() &^ metaMask
			if r.IntN(2) == 0 {
				h = h&^(0xffffffff<<metaBits) | uint64(r.IntN(4))<<metaBits // crowd a few homes
			}
			if h == 0 {
				h = 1 << metaBits
			}
			if r.IntN(3) > 0 && len(keys) > 0 {
				h = keys[r.IntN(len(keys))]
			}
			switch op := r.IntN(10); {
			case op < 6: // decide-like: find or insert, change the state
				sl := tb.find(h)
				if sl < 0 {
					if _, ok := model[h]; ok {
						t.Fatalf("seed %d step %d: present hash %x not found", seed, step, h)
					}
					sl = tb.insert(h)
					keys = append(keys, h)
					model[h] = make([]int64, 9)
				}
				st := tb.load(sl, make([]int64, 9))
				n := r.IntN(10) // the new state's length: 0 to 9 words
				clear(st)
				for i := range n {
					st[i] = int64(r.IntN(3)) + int64(i)
				}
				if n > 0 {
					st[n-1] = 7
				}
				tb.put(sl, st)
				copy(model[h], st)
			default: // remove
				sl := tb.find(h)
				if _, ok := model[h]; ok != (sl >= 0) {
					t.Fatalf("seed %d step %d: find(%x) = %d, model has it: %v", seed, step, h, sl, ok)
				}
				if sl >= 0 {
					tb.remove(sl)
					delete(model, h)
				}
			}
			if tb.n != len(model) || sh.n != len(model) || tb.bigLive > tb.n {
				t.Fatalf("seed %d step %d: table has %d (%d out of line), shard %d, model %d",
					seed, step, tb.n, tb.bigLive, sh.n, len(model))
			}
		}
		check := func(what string) {
			for h, v := range model {
				sl := tb.find(h)
				if sl < 0 {
					t.Fatalf("seed %d: hash %x lost %s", seed, h, what)
				}
				if got := tb.load(sl, make([]int64, 9)); !slices.Equal(got, v) {
					t.Fatalf("seed %d: hash %x %s: state %v, want %v", seed, h, what, got, v)
				}
			}
		}
		check("")
		tb.shrink()
		check("after shrink")
	}
}

// TestConcurrentUseWithEviction hammers a small store from many goroutines
// with DecideOne, Decide, Release, Sync and Sweep at once; run with -race.
func TestConcurrentUseWithEviction(t *testing.T) {
	s := New(Options{Shards: 4, MaxKeys: 256})
	c := newCounter(5, 200*time.Millisecond, 3)
	d := newCounter(50, time.Second, 2)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			out := make([]algorithm.Decision, 2)
			for i := range 3000 {
				now := int64(i) * int64(time.Millisecond)
				k := fmt.Sprint(r.IntN(2000))
				switch i % 7 {
				case 0:
					_ = s.Decide(ctx, now, []store.Request{{Algorithm: c, Key: k, Cost: 1}, {Algorithm: d, Key: k, Cost: 2}}, out)
				case 1:
					_ = s.Release(ctx, now, []store.Request{{Algorithm: c, Key: k, Cost: 1}})
				case 2:
					_ = s.Sync(ctx, now, []store.SyncBatch{{Algorithm: d, Key: k, Events: []store.Event{{Time: now, Cost: 1}}}})
				case 3:
					if g == 0 {
						s.Sweep(now)
					}
				default:
					if _, err := s.DecideOne(ctx, now, store.Request{Algorithm: c, Key: k, Cost: 1}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := s.Len(); got > s.MaxKeys() {
		t.Fatalf("Len %d over MaxKeys %d", got, s.MaxKeys())
	}
}

// TestEvictionAcrossLimits checks that the key bound covers all limits
// together: keys of one limit that went quiet make room for another's.
func TestEvictionAcrossLimits(t *testing.T) {
	s := New(Options{Shards: 2, MaxKeys: 512})
	quiet := newCounter(1<<40, 1000*time.Hour, 2)
	busy := newCounter(1<<40, 1000*time.Hour, 4)
	now := sec
	for i := range 512 {
		now += int64(100 * time.Millisecond)
		decide(t, s, quiet, fmt.Sprint("q", i), now, 1)
	}
	for i := range 5000 {
		now += int64(100 * time.Millisecond)
		decide(t, s, busy, fmt.Sprint("b", i), now, 1)
		if s.Len() > s.MaxKeys() {
			t.Fatalf("Len %d over MaxKeys %d", s.Len(), s.MaxKeys())
		}
	}
	left, charged := 0, 0
	for i := range 512 {
		if tracked(t, s, quiet, fmt.Sprint("q", i)) {
			left++
		} else if count(t, s, quiet, fmt.Sprint("q", i), now) >= 1 {
			charged++ // an evicted key still reads as at least what it had used
		}
	}
	if left+charged != 512 {
		t.Fatalf("%d quiet keys kept and %d evicted ones charged at least their one unit, of 512", left, charged)
	}
	if left > 16 {
		t.Fatalf("%d of 512 long-unused keys of the quiet limit survived 5000 newer keys of another limit", left)
	}
}

// TestManyLimitsStayCheap uses more limits than the scanned part of the
// algorithm cache, in turn, and checks that deciding still allocates nothing
// and that each limit keeps its own counter.
func TestManyLimitsStayCheap(t *testing.T) {
	s := New(Options{})
	algs := make([]*counter, 100)
	for i := range algs {
		algs[i] = newCounter(int64(1000+i), time.Hour, 2)
		decide(t, s, algs[i], "k", sec, 1)
	}
	if raceEnabled {
		t.Log("allocation count not checked under the race detector")
	} else {
		i := 0
		if n := testing.AllocsPerRun(1000, func() {
			_, _ = s.DecideOne(ctx, sec, store.Request{Algorithm: algs[i%len(algs)], Key: "k", Cost: 1})
			i++
		}); n != 0 {
			t.Fatalf("deciding across 100 limits allocates %v times", n)
		}
	}
	for i, a := range algs {
		if got := count(t, s, a, "k", sec); got < 1 || got > 12 {
			t.Fatalf("limit %d: count %d, want its own 1 + its share of 1000 (at most 12)", i, got)
		}
	}
}

// A Bound shares the store's state with DecideOne for the same algorithm,
// allocates nothing on a known key, and refuses a nil algorithm.
func TestBoundSharesStateWithDecideOne(t *testing.T) {
	s := New(Options{})
	c := newCounter(3, time.Minute, 2)
	b, err := s.Bind(c)
	if err != nil {
		t.Fatal(err)
	}
	now := 100 * sec
	if d := b.Decide(now, "a", 2); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("Bound.Decide: %+v, want allowed with 1 remaining", d)
	}
	if d := decide(t, s, c, "a", now, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("DecideOne after Bound.Decide: %+v, want allowed with 0 remaining", d)
	}
	if d := b.Decide(now, "a", 1); d.Allowed {
		t.Fatalf("Bound.Decide over the limit allowed: %+v", d)
	}
	if allocs := testing.AllocsPerRun(1000, func() { b.Decide(now, "a", 1) }); allocs != 0 {
		t.Fatalf("Bound.Decide on a known key allocates %v times", allocs)
	}
	// DecideInto writes the same decision Decide returns.
	var d algorithm.Decision
	b.DecideInto(&d, now, "a", 1)
	if want := b.Decide(now, "a", 1); d != want || d.Allowed {
		t.Fatalf("Bound.DecideInto: %+v, Decide: %+v, want both rejected alike", d, want)
	}
	b.DecideInto(&d, now, "b", 1)
	if !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Bound.DecideInto on a new key: %+v, want allowed with 2 remaining", d)
	}
	if allocs := testing.AllocsPerRun(1000, func() { b.DecideInto(&d, now, "a", 1) }); allocs != 0 {
		t.Fatalf("Bound.DecideInto on a known key allocates %v times", allocs)
	}
	if _, err := s.Bind(nil); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Fatalf("Bind(nil) = %v, want ErrNoAlgorithm", err)
	}
}
