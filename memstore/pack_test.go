package memstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// TestPackedTableConverts fills a packed fixed-window table, then counts a
// request whose state no longer fits in 32-bit halves (with a millisecond
// window, the window number passes 2^32 at 4,294,967.296 s), which
// converts the table to the plain layout with its live keys in it; every
// decision before and after must match the model's.
func TestPackedTableConverts(t *testing.T) {
	for _, name := range []string{algorithm.FixedWindow, algorithm.WeightedWindow} {
		t.Run(name, func(t *testing.T) { testPackedTableConverts(t, name) })
	}
}

func testPackedTableConverts(t *testing.T, name string) {
	a, err := algorithm.New(algorithm.Config{Algorithm: name, Limit: 1000, Window: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Shards: 1})
	m := modelStore{}
	const boundary = int64(1<<32) * int64(time.Millisecond)
	now := boundary - int64(500*time.Microsecond)
	check := func(key string, cost int64) {
		t.Helper()
		req := []store.Request{{Algorithm: a, Key: key, Cost: cost}}
		got, err := s.DecideOne(ctx, now, req[0])
		if err != nil {
			t.Fatal(err)
		}
		var want [1]algorithm.Decision
		m.decide(now, req, want[:])
		if got != want[0] {
			t.Fatalf("%s cost %d: store %+v, model %+v", key, cost, got, want[0])
		}
	}
	const keys = 500
	for i := range keys {
		check(fmt.Sprint("k", i), 1+int64(i%3))
	}
	l, err := s.limitFor(a)
	if err != nil {
		t.Fatal(err)
	}
	tb := s.shards[0].tables[l.id]
	if !tb.packed {
		t.Fatal("a table with small states is not packed")
	}
	bytesBefore := s.Stats().Bytes
	now = boundary + int64(100*time.Microsecond)
	check("k7", 1) // window number 2^32: no longer fits
	if tb.packed {
		t.Fatal("the table is still packed after a state that does not fit")
	}
	if got := s.Stats().Bytes; got != bytesBefore {
		t.Errorf("accounted bytes went from %d to %d in the conversion; a packed table is accounted at its plain size", bytesBefore, got)
	}
	now -= int64(300 * time.Microsecond) // a clock behind the state's window
	for i := range keys {
		check(fmt.Sprint("k", i), 2)
	}
	now = boundary + int64(200*time.Microsecond)
	for i := range keys {
		check(fmt.Sprint("k", i), 3)
	}
	check("new", 1)
	if n := s.Len(); n != keys+1 {
		t.Errorf("store holds %d keys, want %d", n, keys+1)
	}
}

// TestPackRoundTrip checks the packing's bounds: states of two and three
// words in [0, 2^32) come back unchanged, others do not pack.
func TestPackRoundTrip(t *testing.T) {
	for _, st := range [][]int64{{0, 0}, {1, 2}, {half - 1, half - 1}, {493_000, 600}, {7, 8, 9}, {half - 1, 0, half - 1}} {
		packed := make([]int64, (len(st)+1)/2)
		got := make([]int64, len(st))
		ok := packState(packed, st)
		unpackState(got, packed)
		if !ok || !slices.Equal(got, st) {
			t.Errorf("%v packs to %#x, %v; unpacks to %v", st, packed, ok, got)
		}
	}
	for _, st := range [][]int64{{-1, 0}, {0, -1}, {half, 0}, {0, half}, {1 << 62, 5}, {1, 2, half}} {
		if packState(make([]int64, (len(st)+1)/2), st) {
			t.Errorf("%v fits; it must not", st)
		}
	}
}

// TestSlidingWindowNeverPacked checks that a sliding-window table keeps
// whole words from its first key, whichever ring position the clock puts
// the newest slice at (its counts are bit fields: a 32-bit count at an even
// position would fit a half, one at an odd position would not), and that
// its slot is 8·(1+Words()) bytes for 16-bit and 32-bit counts alike.
func TestSlidingWindowNeverPacked(t *testing.T) {
	for _, limit := range []int64{600, algorithm.MaxLimit} {
		a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: limit, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		slice := int64(5 * time.Minute) // 12 slices
		for pos := range int64(4) {
			s := New(Options{Shards: 1})
			now := (1_000_000*12+pos)*slice + 1
			for i := range 100 {
				if _, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: fmt.Sprint("k", i), Cost: 1}); err != nil {
					t.Fatal(err)
				}
			}
			l, err := s.limitFor(a)
			if err != nil {
				t.Fatal(err)
			}
			tb := s.shards[0].tables[l.id]
			if tb.packed || tb.stride != 1+a.Words() {
				t.Errorf("limit %d, newest slice at ring position %d: packed %v, stride %d; want whole words, stride %d",
					limit, pos, tb.packed, tb.stride, 1+a.Words())
			}
		}
	}
}
