package redisstore

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

// TestSharedCallGroups decides, in shared calls, requests with several
// limits each (all or nothing, op 'g') beside single decisions (op 'i'),
// keys shared between them and shadow requests among them, and requires
// what memstore decides for the same requests one after another: the
// singles in their order, then the groups in theirs (the two calls of one
// pipeline run in that order).
func TestSharedCallGroups(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	mem := memstore.New(memstore.Options{})
	ctx := context.Background()
	algs := []algorithm.Algorithm{
		mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 8, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 4, Window: time.Second}),
		mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 6, Window: time.Second, Slices: 4}),
	}
	rng := rand.New(rand.NewPCG(5, 6))
	now := t0
	for step := range 150 {
		now += int64(rng.IntN(120)) * int64(time.Millisecond)
		var batch []*pending
		var singles []store.Request
		var groups [][]store.Request
		for range 1 + rng.IntN(8) {
			req := func() store.Request {
				return store.Request{Algorithm: algs[rng.IntN(len(algs))], Key: []string{"x", "y", "z"}[rng.IntN(3)],
					Cost: 1 + rng.Int64N(2), Shadow: rng.IntN(6) == 0}
			}
			if rng.IntN(3) == 0 {
				r := req()
				sp, err := s.specFor(r.Algorithm)
				if err != nil {
					t.Fatal(err)
				}
				singles = append(singles, r)
				batch = append(batch, &pending{ctx: ctx, now: now, req: r, sp: sp, key: s.key(sp, r.Key), done: make(chan struct{})})
				continue
			}
			reqs := make([]store.Request, 2+rng.IntN(3))
			for i := range reqs {
				reqs[i] = req()
			}
			rs, err := s.resolve(reqs)
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, reqs)
			batch = append(batch, &pending{ctx: ctx, now: now, key: rs[0].key, done: make(chan struct{}),
				group: &groupDecision{reqs: reqs, rs: rs, ds: make([]algorithm.Decision, len(reqs))}})
		}
		var wantSingles []algorithm.Decision
		for _, r := range singles {
			d, err := mem.DecideOne(ctx, now, r)
			if err != nil {
				t.Fatal(err)
			}
			wantSingles = append(wantSingles, d)
		}
		var want [][]algorithm.Decision
		for _, reqs := range groups {
			w := make([]algorithm.Decision, len(reqs))
			if err := mem.Decide(ctx, now, reqs, w); err != nil {
				t.Fatal(err)
			}
			want = append(want, w)
		}
		s.decideShared(batch)
		g, o := 0, 0
		for _, p := range batch {
			waitAnswered(t, p)
			if p.err != nil {
				t.Fatalf("step %d: %v", step, p.err)
			}
			if p.group == nil {
				if got := p.d; got != micros(wantSingles[o]) {
					t.Fatalf("step %d, single %d (%+v): redis %+v, mem %+v", step, o, singles[o], got, micros(wantSingles[o]))
				}
				o++
				continue
			}
			w := want[g]
			for i := range w {
				w[i] = micros(w[i])
			}
			if !slices.Equal(p.group.ds, w) {
				t.Fatalf("step %d, group %d %+v:\nredis %+v\nmem   %+v", step, g, groups[g], p.group.ds, w)
			}
			g++
		}
	}
}

// TestSharedCallGroupUnreadableKey puts a group with a key holding a value
// no script wrote beside other groups in one op 'g' call: that group gets
// the full error, the others their decisions.
func TestSharedCallGroupUnreadableKey(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Second})
	b := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 8, Window: time.Second})
	if _, err := shared.Do("SET", mustKey(t, s, b, "bad"), "not a state"); err != nil {
		t.Fatal(err)
	}
	var batch []*pending
	for _, key := range []string{"good1", "bad", "good2"} {
		reqs := []store.Request{{Algorithm: a, Key: key, Cost: 1}, {Algorithm: b, Key: key, Cost: 1}}
		rs, err := s.resolve(reqs)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, &pending{ctx: ctx, now: t0, key: rs[0].key, done: make(chan struct{}),
			group: &groupDecision{reqs: reqs, rs: rs, ds: make([]algorithm.Decision, 2)}})
	}
	s.decideShared(batch)
	for i, p := range batch {
		waitAnswered(t, p)
		switch {
		case i == 1 && (p.err == nil || !strings.Contains(p.err.Error(), "holds")):
			t.Fatalf("group with the unreadable key: err %v, want the script's error about what the key holds", p.err)
		case i != 1 && p.err != nil:
			t.Fatalf("group %d: %v", i, p.err)
		case i != 1 && (!p.group.ds[0].Allowed || !p.group.ds[1].Allowed || p.group.ds[0].Remaining != 4):
			t.Fatalf("group %d: %+v, want both allowed, 4 left of the fixed window", i, p.group.ds)
		}
	}
	if v, err := shared.Do("GET", mustKey(t, s, a, "bad")); err != nil || v != "" {
		t.Fatalf("the failed group's other key holds %q (%v), want nothing counted", v, err)
	}
}
