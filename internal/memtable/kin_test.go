package memtable

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

func mustAlg(t *testing.T, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestKinKeepCounts: limits of one Counter and identity share each key's
// count through every way into the store (DecideOne, Decide, Sync), each
// deciding with its own limit; limits of another Counter, or of none,
// count apart; Reset forgets the key under every limit of its kin.
func TestKinKeepCounts(t *testing.T) {
	ctx := context.Background()
	now := int64(1e15)
	for _, name := range []algorithm.Name{algorithm.BoundedLog, algorithm.FixedWindow, algorithm.GCRA} {
		t.Run(string(name), func(t *testing.T) {
			s := New(Options{})
			low := mustAlg(t, algorithm.Config{Algorithm: name, Limit: 10, Window: time.Minute, Counter: "c"})
			high := mustAlg(t, algorithm.Config{Algorithm: name, Limit: 100, Window: time.Minute, Counter: "c"})
			other := mustAlg(t, algorithm.Config{Algorithm: name, Limit: 100, Window: time.Minute, Counter: "d"})
			plain := mustAlg(t, algorithm.Config{Algorithm: name, Limit: 100, Window: time.Minute})
			for i := range 10 {
				if d, _ := s.DecideOne(ctx, now, store.Request{Algorithm: low, Key: "k", Cost: 1}); !d.Allowed {
					t.Fatalf("request %d under 10 rejected", i)
				}
			}
			// The raised limit sees the 10 (DecideOne).
			if d, _ := s.DecideOne(ctx, now, store.Request{Algorithm: high, Key: "k", Cost: 1}); !d.Allowed || d.Remaining != 89 {
				t.Fatalf("under 100 after 10: %+v, want allowed with 89 left", d)
			}
			// Back under 10 (Decide, two requests): 11 counted, rejected.
			out := make([]algorithm.Decision, 2)
			if err := s.Decide(ctx, now, []store.Request{{Algorithm: low, Key: "k", Cost: 1}, {Algorithm: plain, Key: "k", Cost: 1}}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed || !out[1].Allowed || out[1].Remaining != 99 {
				t.Fatalf("under 10 with 11 counted, beside a limit of no Counter: %+v", out)
			}
			// A peek through Sync under the raised limit: 11 counted.
			b := []store.SyncBatch{{Algorithm: high, Key: "k"}}
			if err := s.Sync(ctx, now, b); err != nil {
				t.Fatal(err)
			}
			if d := high.Peek(b[0].State, now, 1); d.Remaining != 88 {
				t.Fatalf("peek under 100 after 11: %+v", d)
			}
			// Another Counter counts apart.
			if d, _ := s.DecideOne(ctx, now, store.Request{Algorithm: other, Key: "k", Cost: 1}); d.Remaining != 99 {
				t.Fatalf("another counter: %+v, want a fresh count", d)
			}
			// Reset under one limit forgets the key under its kin.
			if err := s.Reset(ctx, low, "k"); err != nil {
				t.Fatal(err)
			}
			if d, _ := s.DecideOne(ctx, now, store.Request{Algorithm: high, Key: "k", Cost: 1}); d.Remaining != 99 {
				t.Fatalf("after Reset: %+v, want a fresh count", d)
			}
			if !s.KeepsCounts(high) {
				t.Fatal("KeepsCounts is false")
			}
		})
	}
}
