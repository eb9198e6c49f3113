package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// regionRig is three regions, each a redis-server of its own, whose stores
// forward their pushes to the two others.
type regionRig struct {
	t       *testing.T
	names   []string
	servers map[string]*redistest.Server
	stores  map[string]*Store
	rule    algorithm.Algorithm
	seq     uint64
	base    int64
}

func newRegionRig(t *testing.T) *regionRig {
	needRedis(t)
	r := &regionRig{t: t, names: []string{"a", "b", "c"}, servers: map[string]*redistest.Server{}, stores: map[string]*Store{},
		base: time.Date(2026, 7, 30, 12, 0, 0, 0, time.UTC).UnixNano()}
	r.rule = mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 100000, Window: time.Hour})
	for _, n := range r.names {
		r.servers[n] = redistest.Start(t)
	}
	for _, n := range r.names {
		r.stores[n] = r.store(n, time.Minute)
	}
	return r
}

// store connects to region n's Redis, forwarding to the others.
func (r *regionRig) store(n string, timeout time.Duration) *Store {
	others := slices.DeleteFunc(slices.Clone(r.names), func(x string) bool { return x == n })
	return newStore(r.t, Options{Addrs: []string{r.servers[n].Addr()}, Prefix: "fg", ClientTime: true, Timeout: timeout, Outbox: others})
}

// exchange returns region n's exchange with the others through stores.
func (r *regionRig) exchange(n string, holder string, remotes map[string]*Store) *Exchange {
	r.t.Helper()
	x, err := NewExchange(r.stores[n], ExchangeOptions{Region: n, Remotes: remotes, Holder: holder})
	if err != nil {
		r.t.Fatal(err)
	}
	return x
}

func (r *regionRig) remotes(n string) map[string]*Store {
	m := map[string]*Store{}
	for _, o := range r.names {
		if o != n {
			m[o] = r.stores[o]
		}
	}
	return m
}

// push pushes cost 1 on each of keys to region n, as a node does.
func (r *regionRig) push(n string, keys []string) []store.SyncBatch {
	r.t.Helper()
	r.seq++
	b := make([]store.SyncBatch, len(keys))
	for i, k := range keys {
		b[i] = store.SyncBatch{Algorithm: r.rule, Key: k, Events: []store.Event{{Time: r.base + int64(i), Cost: 1}}, UnseenSince: r.base - int64(time.Hour)}
	}
	err := r.stores[n].SyncOnce(context.Background(), r.base, store.SyncID{Origin: "node-" + n, Seq: r.seq, Remember: time.Hour}, b)
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

// count returns what region n's Redis counts for key.
func (r *regionRig) count(n, key string) int64 {
	r.t.Helper()
	b := []store.SyncBatch{{Algorithm: r.rule, Key: key}}
	if err := r.stores[n].Sync(context.Background(), r.base, b); err != nil {
		r.t.Fatal(err)
	}
	return usedOf(r.rule, b[0].State, r.base)
}

func usedOf(a algorithm.Algorithm, st []int64, now int64) int64 {
	return a.Peek(make([]int64, a.Words()), now, 1).Remaining - a.Peek(st, now, 1).Remaining
}

func keysNamed(prefix string, n int) []string {
	k := make([]string, n)
	for i := range k {
		k[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return k
}

// TestExchangeForwardsOnce: pushes to each region reach the two others
// through their exchanges, each count once; a batch sent again (an
// exchanger that stopped between sending and dropping it, another one
// taking over) is skipped where it was applied; and each push answers how
// much of each key the other regions have not received yet.
func TestExchangeForwardsOnce(t *testing.T) {
	r := newRegionRig(t)
	ctx := context.Background()
	keys := keysNamed("k", 300) // more than one call of a sealed batch
	for _, n := range r.names {
		b := r.push(n, keys)
		if b[0].Unseen != 1 {
			t.Fatalf("region %s: a key pushed once, not forwarded yet, has %d unseen", n, b[0].Unseen)
		}
	}
	xs := map[string]*Exchange{}
	for _, n := range r.names {
		xs[n] = r.exchange(n, "x-"+n, r.remotes(n))
		if err := xs[n].Step(ctx, r.base); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range r.names {
		for _, k := range []string{keys[0], keys[299]} {
			if got := r.count(n, k); got != 3 {
				t.Fatalf("region %s counts %s %d times, want 3", n, k, got)
			}
		}
	}
	if b := r.push("a", keys[:1]); b[0].Unseen != 1 {
		t.Fatalf("after the exchange, a new push leaves %d unseen, want 1 (itself)", b[0].Unseen)
	}

	// An exchanger that sent a's sealed batch to b, and stopped before
	// dropping it: the next one (another node, the lease expired) sends
	// it again, and b counts it once.
	l := r.stores["a"]
	x := xs["a"]
	tag := tagOf(mustKey(t, l, r.rule, keys[0]))
	res, err := l.script(ctx, r.base, []string{l.outboxKey(tag, "b"), l.sealedKey(tag, "b"), l.xstateKey(tag, "b")}, "seal", x.epoch)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := res.ToArray()
	seq, _ := v[0].AsInt64()
	epoch, _ := v[2].ToString()
	fields, err := x.sealed(ctx, l.sealedKey(tag, "b"))
	if err != nil {
		t.Fatal(err)
	}
	calls, err := forwardCalls(r.stores["b"], r.stores["b"].now(r.base), "a/"+tag+"/"+epoch, uint64(seq), fields)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.stores["b"].exec(ctx, calls); err != nil {
		t.Fatal(err)
	}
	client, err := l.connect()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Do(ctx, client.B().Del().Key(l.exchangeKey("lease:b")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := r.exchange("a", "another node", r.remotes("a")).Step(ctx, r.base); err != nil {
		t.Fatal(err)
	}
	if got := r.count("b", keys[0]); got != 4 {
		t.Fatalf("b counts %d for the key after the batch was sent twice, want 4", got)
	}
	// The first exchanger, stale, sends the same batch a third time.
	if _, err := r.stores["b"].exec(ctx, calls); err != nil {
		t.Fatal(err)
	}
	if got := r.count("b", keys[0]); got != 4 {
		t.Fatalf("b counts %d after a stale copy, want 4", got)
	}
	// The first exchanger no longer holds b's lease: its round to b is
	// skipped; it still holds c's.
	if err := x.Step(ctx, r.base); err != nil {
		t.Fatal(err)
	}
	if got := r.count("b", keys[0]); got != 4 {
		t.Fatalf("b counts %d after the old holder's round, want 4", got)
	}
	if got := r.count("c", keys[0]); got != 4 {
		t.Fatalf("c counts %d, want 4", got)
	}
}

// TestExchangeCutAndBack: while b's Redis cannot be reached, a's counts
// for b wait in a's outbox (unseen for a's pushes) and a's link to b
// stops; when b answers again every count arrives once, and the links say
// so in both regions' heartbeats.
func TestExchangeCutAndBack(t *testing.T) {
	r := newRegionRig(t)
	ctx := context.Background()
	keys := keysNamed("cut", 10)
	r.push("a", keys)
	remotes := r.remotes("a")
	remotes["b"] = r.store("b", 300*time.Millisecond)
	x := r.exchange("a", "x", remotes)
	if err := x.Step(ctx, r.base); err != nil {
		t.Fatal(err)
	}
	census := func(n string) store.Census {
		c, err := r.stores[n].Heartbeat(ctx, r.base, store.Beat{Group: "g", Member: "m", Expiry: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	link := func(c store.Census, region string) store.Link {
		for _, l := range c.Links {
			if l.Region == region {
				return l
			}
		}
		t.Fatalf("no link to %s in %+v", region, c.Links)
		return store.Link{}
	}
	if l := link(census("a"), "b"); l.Sent != r.base {
		t.Fatalf("a's link to b after a round: %+v, want sent at the round", l)
	}
	if l := link(census("b"), "a"); l.Received != r.base {
		t.Fatalf("b's link to a after a round: %+v, want received at the round", l)
	}
	r.servers["b"].Pause()
	for i := range 5 {
		r.push("a", keys)
		if err := x.Step(ctx, r.base+int64(i+1)*int64(time.Second)); err == nil {
			t.Fatal("a round reached b while it was paused")
		}
	}
	b := r.push("a", keys)
	if b[0].Unseen != 6 {
		t.Fatalf("a's key unseen during the cut: %d, want 6 (5 pushed since, and this one)", b[0].Unseen)
	}
	if l := link(census("a"), "b"); l.Sent != r.base {
		t.Fatalf("a's link to b during the cut: %+v, still the first round's", l)
	}
	r.servers["b"].Resume()
	back := r.base + 10*int64(time.Second)
	if err := x.Step(ctx, back); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if got := r.count("b", k); got != 7 {
			t.Fatalf("b counts %s %d times after the cut, want 7", k, got)
		}
		if got := r.count("c", k); got != 7 {
			t.Fatalf("c counts %s %d times, want 7", k, got)
		}
	}
	if l := link(census("a"), "b"); l.Sent != back {
		t.Fatalf("a's link to b after the cut: %+v", l)
	}
}

// TestExchangeAfterLocalWipe: a region's Redis that lost its data (a
// restart without persistence) starts its batches from 1 again under a new
// epoch, and the other regions apply them instead of taking them for
// copies of the batches they had.
func TestExchangeAfterLocalWipe(t *testing.T) {
	r := newRegionRig(t)
	ctx := context.Background()
	keys := keysNamed("w", 3)
	for range 3 {
		r.push("a", keys)
		if err := r.exchange("a", "x1", r.remotes("a")).Step(ctx, r.base); err != nil {
			t.Fatal(err)
		}
	}
	r.servers["a"].FlushAll()
	r.stores["a"].tags.Clear() // as relistEvery does
	r.push("a", keys)
	if err := r.exchange("a", "x2", r.remotes("a")).Step(ctx, r.base); err != nil {
		t.Fatal(err)
	}
	if got := r.count("b", keys[0]); got != 4 {
		t.Fatalf("b counts %d after a's wipe, want 4", got)
	}
}

// TestOutboxKeepsACutsSpread: a key pushed once a second for 100 s while
// its region forwards nothing (more pushes than an outbox field keeps
// events) reaches the other region with its counts still spread over the
// 100 s: at the end, a minute's window there holds the last minute's 60
// requests and a few merged into later ones, not the whole 100.
func TestOutboxKeepsACutsSpread(t *testing.T) {
	r := newRegionRig(t)
	ctx := context.Background()
	minute := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingLog, Limit: 1000, Window: time.Minute})
	for i := range 100 {
		at := r.base + int64(i)*int64(time.Second)
		r.seq++
		b := []store.SyncBatch{{Algorithm: minute, Key: "spread", Events: []store.Event{{Time: at, Cost: 1}}}}
		if err := r.stores["a"].SyncOnce(ctx, at, store.SyncID{Origin: "node-a", Seq: r.seq, Remember: time.Hour}, b); err != nil {
			t.Fatal(err)
		}
	}
	end := r.base + 99*int64(time.Second)
	if err := r.exchange("a", "x", r.remotes("a")).Step(ctx, end); err != nil {
		t.Fatal(err)
	}
	b := []store.SyncBatch{{Algorithm: minute, Key: "spread"}}
	if err := r.stores["b"].Sync(ctx, end, b); err != nil {
		t.Fatal(err)
	}
	got := usedOf(minute, b[0].State, end)
	t.Logf("b counts %d of the 100 requests in the minute up to the last (60 happened in it)", got)
	if got < 60 || got > 66 {
		t.Errorf("b counts %d in the last minute, want 60 to 66: the forwarded counts lost their spread", got)
	}
}
