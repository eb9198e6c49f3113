package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

func newClusterStore(t *testing.T) *Store {
	t.Helper()
	c := sharedCluster(t)
	return newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true})
}

// TestClusterSlots checks the store's CRC16 against the cluster's own.
func TestClusterSlots(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t)
	for i := range 50 {
		a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: int64(1 + i), Window: time.Second})
		k, _ := s.Key(a, fmt.Sprintf("client-%d", i))
		if got, want := int(slot(k)), c.Slot(k); got != want {
			t.Fatalf("slot(%q) = %d, cluster says %d", k, got, want)
		}
	}
	if got, want := int(slot("no-tag")), c.Slot("no-tag"); got != want {
		t.Fatalf("slot(no-tag) = %d, cluster says %d", got, want)
	}
}

// TestClusterDecideAndSync runs limits spread over the three masters and
// compares every decision and merged state with the Go algorithms.
func TestClusterDecideAndSync(t *testing.T) {
	s := newClusterStore(t)
	ctx := context.Background()
	var refs []*goRef
	owners := map[uint16]bool{}
	for i := range 12 {
		a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: int64(5 + i), Window: time.Second})
		refs = append(refs, &goRef{alg: a, states: map[string][]int64{}})
		k, _ := s.Key(a, "x")
		owners[slot(k)] = true
	}
	now := t0
	for step := range 300 {
		now += int64(step%7) * int64(time.Millisecond) * 10
		r := refs[step%len(refs)]
		key := fmt.Sprint("k", step%3)
		want := micros(r.alg.Decide(r.state(key), now, 1))
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: r.alg, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d: redis %+v, go %+v", step, got, want)
		}
	}
	// One Sync over every key of every limit.
	var batches []store.SyncBatch
	for _, r := range refs {
		for k := range 3 {
			key := fmt.Sprint("k", k)
			ev := []store.Event{{Time: now, Cost: 1}}
			r.alg.Record(r.state(key), now, 1)
			batches = append(batches, store.SyncBatch{Algorithm: r.alg, Key: key, Events: ev})
		}
	}
	if err := s.Sync(ctx, now, batches); err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		r := refs[i/3]
		if !sameState(r.alg, b.State, r.state(b.Key)) {
			t.Fatalf("batch %d: redis %v, go %v", i, b.State, r.state(b.Key))
		}
	}
}

// TestClusterCrossSlotDecide checks the two-round decision across slots: a
// rejection in one slot leaves the other slot's limit uncounted.
func TestClusterCrossSlotDecide(t *testing.T) {
	s := newClusterStore(t)
	ctx := context.Background()
	wide := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Minute})
	var narrow algorithm.Algorithm
	kw, _ := s.Key(wide, "u")
	for w := 2; narrow == nil; w++ {
		a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Duration(w) * time.Minute})
		if k, _ := s.Key(a, "u"); slot(k) != slot(kw) {
			narrow = a
		}
	}
	reqs := []store.Request{{Algorithm: wide, Key: "u", Cost: 1}, {Algorithm: narrow, Key: "u", Cost: 1}}
	out := make([]algorithm.Decision, 2)
	if err := s.Decide(ctx, t0, reqs, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("first: %+v, %v", out, err)
	}
	if err := s.Decide(ctx, t0, reqs, out); err != nil || !out[0].Allowed || out[1].Allowed {
		t.Fatalf("second: %+v, %v; want the narrow limit to reject", out, err)
	}
	// The wide limit counted only the first request.
	d, err := s.DecideOne(ctx, t0, store.Request{Algorithm: wide, Key: "u", Cost: 1})
	if err != nil || d.Remaining != 3 {
		t.Fatalf("wide limit after a rejected pair: %+v, %v; want 3 remaining", d, err)
	}
	// A shadow rejection does not block.
	reqs[1].Shadow = true
	if err := s.Decide(ctx, t0, reqs, out); err != nil || !out[0].Allowed || out[1].Allowed || out[0].Remaining != 2 {
		t.Fatalf("with the narrow limit in shadow: %+v, %v", out, err)
	}
}

// TestClusterMigration decides through a live slot migration: while the
// key is still on the source, after it moved (ASK), and after the slot
// changed owner (MOVED), every decision equals the Go algorithm's, so no
// count was lost or doubled.
func TestClusterMigration(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t)
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 50, Window: time.Minute})
	ref := &goRef{alg: a, states: map[string][]int64{}}
	now := t0
	decide := func(phase, key string, n int) {
		t.Helper()
		for i := range n {
			now += int64(time.Millisecond)
			want := micros(a.Decide(ref.state(key), now, 1))
			got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: 1})
			if err != nil {
				t.Fatalf("%s, request %d: %v", phase, i, err)
			}
			if got != want {
				t.Fatalf("%s, request %d: redis %+v, go %+v", phase, i, got, want)
			}
		}
	}
	decide("before", "m", 10)
	k, _ := s.Key(a, "m")
	sl := int(slot(k))
	from := c.Owner(sl)
	to := (from + 1) % 3
	c.BeginMigration(sl, to)
	decide("migrating, key on the source", "m", 10)
	c.MigrateKeys(from, to, k)
	decide("migrating, key moved (ASK)", "m", 10)
	decide("migrating, new key (ASK)", "m2", 5)
	c.FinishMigration(sl, from, to)
	decide("after (MOVED)", "m", 10)
	decide("after (MOVED)", "m2", 5)
	// The redirections really happened: the source answered ASK, then MOVED.
	stats, err := c.Servers()[from].Do("INFO", "errorstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"errorstat_ASK:", "errorstat_MOVED:"} {
		if !strings.Contains(stats, e) {
			t.Fatalf("source never answered %s during the test:\n%s", e, stats)
		}
	}
	if c.Owner(sl) != to {
		t.Fatalf("slot %d did not move", sl)
	}
	// The state lives on the new owner only.
	if v, err := c.Servers()[to].Do("EXISTS", k); err != nil || v != "1" {
		t.Fatalf("EXISTS on new owner: %q, %v", v, err)
	}
}

// TestClusterTryAgain decides two keys of one limit (one slot, one atomic
// call) while a migration has moved one key and not the other: Redis answers
// TRYAGAIN until the migration ends, and the store retries until it does.
func TestClusterTryAgain(t *testing.T) {
	c := sharedCluster(t)
	s := newClusterStore(t)
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 10, Window: time.Hour})
	reqs := []store.Request{{Algorithm: a, Key: "left", Cost: 1}, {Algorithm: a, Key: "right", Cost: 1}}
	out := make([]algorithm.Decision, 2)
	if err := s.Decide(ctx, t0, reqs, out); err != nil || !out[0].Allowed || !out[1].Allowed {
		t.Fatalf("before: %+v, %v", out, err)
	}
	kl, _ := s.Key(a, "left")
	sl := int(slot(kl))
	from := c.Owner(sl)
	to := (from + 2) % 3
	c.BeginMigration(sl, to)
	c.MigrateKeys(from, to, kl)
	done := make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		c.FinishMigration(sl, from, to)
		close(done)
	}()
	err := s.Decide(ctx, t0, reqs, out)
	<-done
	if err != nil {
		t.Fatalf("during the migration: %v", err)
	}
	if !out[0].Allowed || !out[1].Allowed || out[0].Remaining != 8 || out[1].Remaining != 8 {
		t.Fatalf("during the migration: %+v; want both allowed with 8 remaining", out)
	}
	stats, _ := c.Servers()[from].Do("INFO", "errorstats")
	stats2, _ := c.Servers()[to].Do("INFO", "errorstats")
	if !strings.Contains(stats+stats2, "errorstat_TRYAGAIN") {
		t.Fatalf("no TRYAGAIN was answered, so the retry was not exercised:\n%s\n%s", stats, stats2)
	}
}

// TestClusterSpread spreads one limit over 8 hash tags: its keys land on
// more than one master, and every decision still equals the Go algorithm's.
func TestClusterSpread(t *testing.T) {
	c := sharedCluster(t)
	s := newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true, SlotsPerLimit: 8})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 7, Window: time.Second, Slices: 4})
	ref := &goRef{alg: a, states: map[string][]int64{}}
	masters := map[int]bool{}
	for k := range 40 {
		name, _ := s.Key(a, fmt.Sprint("c", k))
		masters[c.Owner(int(slot(name)))] = true
	}
	if len(masters) < 2 {
		t.Fatalf("40 keys of one limit over 8 tags landed on %d master(s)", len(masters))
	}
	now := t0
	for step := range 400 {
		now += int64(step%5) * int64(time.Millisecond) * 7
		key := fmt.Sprint("c", step%40)
		want := micros(a.Decide(ref.state(key), now, 1))
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d: redis %+v, go %+v", step, got, want)
		}
	}
}

// TestClusterHashGroup: limits whose Counters start with one {group} keep
// every key in one slot, whatever the limit and key (SlotsPerLimit does not
// spread them), under names apart from each other's and from ungrouped
// limits'; a request over three of them is decided in one call, so a
// rejection on one counts on none.
func TestClusterHashGroup(t *testing.T) {
	c := sharedCluster(t)
	s := newStore(t, Options{Addrs: c.Addrs()[:1], Cluster: true, ClientTime: true, SlotsPerLimit: 8})
	ctx := context.Background()
	alg := func(counter string, limit int64) algorithm.Algorithm {
		return mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: limit, Window: time.Minute, Counter: counter})
	}
	org, team, user := alg("{acme}org", 100), alg("{acme}team", 40), alg("{acme}user", 2)
	names := map[string]bool{}
	slots := map[uint16]bool{}
	for _, a := range []algorithm.Algorithm{org, team, user, alg("org", 100)} {
		for i := range 20 {
			k, err := s.Key(a, fmt.Sprint("member-", i))
			if err != nil {
				t.Fatal(err)
			}
			if names[k] {
				t.Fatalf("two counters share the key %s", k)
			}
			names[k] = true
			if a.Config().Counter != "org" {
				slots[slot(k)] = true
			}
		}
	}
	if len(slots) != 1 {
		t.Fatalf("a group's keys fall in %d slots", len(slots))
	}
	reqs := []store.Request{{Algorithm: org, Key: "o"}, {Algorithm: team, Key: "t"}, {Algorithm: user, Key: "u"}}
	for i := range reqs {
		reqs[i].Cost = 1
	}
	out := make([]algorithm.Decision, 3)
	for i := range 3 {
		if err := s.Decide(ctx, t0, reqs, out); err != nil {
			t.Fatal(err)
		}
		if out[2].Allowed != (i < 2) {
			t.Fatalf("request %d: user allowed %v", i, out[2].Allowed)
		}
	}
	// The third was rejected by the user's limit and counted nowhere.
	if err := s.Decide(ctx, t0, reqs[:2], out[:2]); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 97 || out[1].Remaining != 37 {
		t.Fatalf("after 2 allowed and 1 rejected, then 1 more: org %d left, team %d, want 97 and 37", out[0].Remaining, out[1].Remaining)
	}
}
