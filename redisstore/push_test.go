package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDifferentialPush replays random pushes as the delayed arrangement
// sends them (many keys of two limits interleaved, so a call holds several
// runs of one limit's keys; keys named twice in one push; events mostly in
// time order with cost 1, some with other costs or late, a clock that
// sometimes steps back) through Sync and through the Go algorithm's
// Record, and requires every returned state to equal Go's state after
// that batch's events.
func TestDifferentialPush(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	other := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1})
	for ci, c := range diffConfigs {
		t.Run(name(c), func(t *testing.T) {
			algs := []algorithm.Algorithm{mustAlg(t, c), other}
			refs := []*goRef{{alg: algs[0], states: map[string][]int64{}}, {alg: algs[1], states: map[string][]int64{}}}
			prefix := fmt.Sprint("push", ci, "-")
			rng := rand.New(rand.NewPCG(uint64(ci), 23))
			now := t0
			for step := range 60 {
				switch r := rng.IntN(20); {
				case r == 0:
					now -= int64(rng.IntN(300)) * int64(time.Millisecond)
				case r < 4:
					now += int64(rng.IntN(3000)) * int64(time.Millisecond)
				default:
					now += int64(rng.IntN(200)) * int64(time.Millisecond)
				}
				batches := make([]store.SyncBatch, 1+rng.IntN(12))
				which := make([]int, len(batches))
				for i := range batches {
					which[i] = rng.IntN(10) / 7 // 0 for 70% of the keys
					evs := make([]store.Event, rng.IntN(6))
					at := now - int64(rng.IntN(400))*int64(time.Millisecond)
					for k := range evs {
						at += int64(rng.IntN(50)) * int64(time.Millisecond)
						e := store.Event{Time: at, Cost: 1}
						switch rng.IntN(8) {
						case 0:
							e.Cost = int64(rng.IntN(4))
						case 1:
							e.Time = now - int64(rng.IntN(1500))*int64(time.Millisecond)
						}
						evs[k] = e
					}
					batches[i] = store.SyncBatch{Algorithm: algs[which[i]], Key: prefix + fmt.Sprint(which[i], "-", rng.IntN(6)), Events: evs}
				}
				want := make([][]int64, len(batches))
				for i, b := range batches {
					st := refs[which[i]].state(b.Key)
					for _, e := range b.Events {
						algs[which[i]].Record(st, e.Time, e.Cost)
					}
					want[i] = append([]int64(nil), st...)
				}
				if err := s.Sync(ctx, now, batches); err != nil {
					t.Fatal(err)
				}
				for i, b := range batches {
					if !sameState(b.Algorithm, b.State, want[i]) {
						t.Fatalf("step %d, batch %d (key %s, events %v):\nredis %v\ngo    %v", step, i, b.Key, b.Events, b.State, want[i])
					}
				}
			}
		})
	}
}

// TestPushSplitKey pushes one key more events than one script call takes
// (the rest go on in the next call of the same pipeline) and requires the
// state Go's Record builds from them all.
func TestPushSplitKey(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.FixedWindow, Limit: 100000, Window: time.Minute},
		{Algorithm: algorithm.BoundedLog, Limit: 100000, Window: time.Minute},
	} {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			want := make([]int64, a.Words())
			evs := make([]store.Event, maxBatchEvents+500)
			for i := range evs {
				evs[i] = store.Event{Time: t0 + int64(i)*int64(time.Millisecond), Cost: 1 + int64(i%7/6)}
				a.Record(want, evs[i].Time, evs[i].Cost)
			}
			b := []store.SyncBatch{{Algorithm: a, Key: "split"}, {Algorithm: a, Key: "split-2", Events: evs}}
			if err := s.Sync(ctx, evs[len(evs)-1].Time, b); err != nil {
				t.Fatal(err)
			}
			if !sameState(a, b[1].State, want) {
				t.Fatalf("redis %v\ngo    %v", b[1].State, want)
			}
		})
	}
}

// TestPushBoundedLogOneEntry pushes bounded-log events at the edges of the
// merge that keeps a key at one entry (an entry whose first time is
// exactly a window old, one that is a microsecond younger, an entry filled
// to m units and one past it, an event before the newest) and requires
// Go's Record state after each push.
func TestPushBoundedLogOneEntry(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	c := algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1} // m = 2
	a := mustAlg(t, c)
	const ms, us = int64(time.Millisecond), int64(time.Microsecond)
	W := int64(time.Second)
	for _, tc := range []struct {
		name   string
		pushes [][]store.Event
	}{
		{"first exactly a window old", [][]store.Event{{{Time: t0, Cost: 1}, {Time: t0 + 10*ms, Cost: 1}}, {{Time: t0 + W, Cost: 1}}}},
		{"first a microsecond younger than a window", [][]store.Event{{{Time: t0, Cost: 1}}, {{Time: t0 + W - us, Cost: 1}}}},
		{"newest exactly a window old", [][]store.Event{{{Time: t0, Cost: 1}}, {{Time: t0 + W, Cost: 1}, {Time: t0 + W, Cost: 1}}}},
		{"filled to m, then one more", [][]store.Event{{{Time: t0, Cost: 1}, {Time: t0 + ms, Cost: 1}}, {{Time: t0 + 2*ms, Cost: 1}}}},
		{"more than m at once", [][]store.Event{{{Time: t0, Cost: 3}}, {{Time: t0 + ms, Cost: 2}}}},
		{"an event before the newest", [][]store.Event{{{Time: t0 + 5*ms, Cost: 1}}, {{Time: t0 + 4*ms, Cost: 1}, {Time: t0 + 6*ms, Cost: 1}}}},
		{"cost 0 between", [][]store.Event{{{Time: t0, Cost: 1}, {Time: t0 + ms, Cost: 0}, {Time: t0 + 2*ms, Cost: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]int64, a.Words())
			for i, evs := range tc.pushes {
				for _, e := range evs {
					a.Record(want, e.Time, e.Cost)
				}
				b := []store.SyncBatch{{Algorithm: a, Key: "one-entry-" + tc.name, Events: evs}}
				if err := s.Sync(ctx, evs[len(evs)-1].Time, b); err != nil {
					t.Fatal(err)
				}
				if !sameState(a, b[0].State, want) {
					t.Fatalf("push %d: redis %v\ngo    %v", i, b[0].State, want)
				}
			}
		})
	}
}

// FuzzOneTimeState reads any string a sync could return: a one-time form
// decodes to its count and time, anything else is left to unpackState,
// and nothing panics.
func FuzzOneTimeState(f *testing.F) {
	f.Add("11764470000000000")
	f.Add("9991764470000000000")
	f.Add("01764470000000000")
	f.Add("-1000000021764470000")
	f.Add("12345678")
	f.Fuzz(func(t *testing.T, v string) {
		if !oneTime(v) {
			return
		}
		w := oneTimeState(v, 3, nil)
		c, tm := (w[0]-1<<52-1)>>18, w[1]
		if got := fmt.Sprintf("%d%016d", c, tm); got != v || w[2] != tm || c < 1 {
			t.Fatalf("%q read as count %d, time %d (%q)", v, c, tm, got)
		}
	})
}

// TestPushNewKeysOneTime pushes, in one call, keys Redis does not hold:
// those whose events came at one time are written in the one-time form
// without building a state, the others merged as before. Every key's
// returned state, and its state read back, equals Go's Record, and a key
// written the short way holds exactly the one-time form.
func TestPushNewKeysOneTime(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Second}) // m = 30
	m := int64(30)
	const ms = int64(time.Millisecond)
	at := func(d int64, costs ...int64) []store.Event {
		var evs []store.Event
		for _, c := range costs {
			evs = append(evs, store.Event{Time: t0 + d, Cost: c})
		}
		return evs
	}
	cases := []struct {
		key   string
		evs   []store.Event
		short bool // written in the one-time form without a state
	}{
		{"one", at(0, 1), true},
		{"three at once", at(ms, 1, 1, 1), true},
		{"costs 0 and 2", at(2*ms, 0, 2, 0), true},
		{"exactly m", at(3*ms, m), true},
		{"one over m", at(4*ms, m, 1), false},
		{"only cost 0", at(5*ms, 0, 0), false},
		{"two times", append(at(6*ms, 1), at(7*ms, 1)...), false},
		{"named twice", at(8*ms, 2), true},
		{"named twice", at(9*ms, 1), false},
		{"named twice, no events", nil, false},
		{"again no events", nil, false},
		{"named twice, no events", nil, false},
	}
	want := map[string][]int64{}
	batches := make([]store.SyncBatch, len(cases))
	for i, c := range cases {
		if want[c.key] == nil {
			want[c.key] = make([]int64, a.Words())
		}
		for _, e := range c.evs {
			a.Record(want[c.key], e.Time, e.Cost)
		}
		batches[i] = store.SyncBatch{Algorithm: a, Key: c.key, Events: c.evs}
	}
	if err := s.Sync(ctx, t0+10*ms, batches); err != nil {
		t.Fatal(err)
	}
	seen := map[string][]int64{}
	for i, c := range cases {
		if seen[c.key] == nil {
			seen[c.key] = make([]int64, a.Words())
		}
		for _, e := range c.evs {
			a.Record(seen[c.key], e.Time, e.Cost)
		}
		if !sameState(a, batches[i].State, seen[c.key]) {
			t.Fatalf("%s (mention %d): returned %v, go %v", c.key, i, batches[i].State, seen[c.key])
		}
	}
	for _, c := range cases {
		if !c.short || c.key == "named twice" || c.key == "named twice, no events" {
			continue
		}
		var units int64
		for _, e := range c.evs {
			units += e.Cost
		}
		v, err := shared.Do("GET", mustKey(t, s, a, c.key))
		if err != nil {
			t.Fatal(err)
		}
		if wantV := fmt.Sprintf("%d%016d", units, c.evs[0].Time/int64(time.Microsecond)); v != wantV {
			t.Fatalf("%s: Redis holds %q, want the one-time form %q", c.key, v, wantV)
		}
	}
	for key, st := range want {
		b := []store.SyncBatch{{Algorithm: a, Key: key}, {Algorithm: a, Key: "other"}}
		if err := s.Sync(ctx, t0+10*ms, b); err != nil {
			t.Fatal(err)
		}
		if !sameState(a, b[0].State, st) {
			t.Fatalf("%s read back: redis %v, go %v", key, b[0].State, st)
		}
	}
}
