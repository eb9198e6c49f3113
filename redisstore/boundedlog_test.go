package redisstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// packDoubles packs words as the script stores a state: little-endian
// doubles, trailing zero words left out.
func packDoubles(words []float64) string {
	for len(words) > 0 && words[len(words)-1] == 0 {
		words = words[:len(words)-1]
	}
	var b strings.Builder
	for _, w := range words {
		bits := math.Float64bits(w)
		for i := 0; i < 8; i++ {
			b.WriteByte(byte(bits >> (8 * i)))
		}
	}
	return b.String()
}

// TestBoundedLogRingFormatConverted stores a bounded-log key in the ring
// form the script wrote before the compact encoding (entries, oldest index,
// then first, last, count per ring slot, in µs) and checks that the first
// touch reads it correctly and rewrites it in the compact form: the
// decision and the state match Go's on the equivalent compact state.
func TestBoundedLogRingFormatConverted(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1})
	p, _ := algorithm.ParamsOf(a)
	size := int(p.Entries) // m = 2
	us := t0 / 1000
	ms := int64(1000)
	// Ring index 1: slot 1 holds (t0-500ms .. t0-400ms, 2 units), slot 2
	// holds (t0-300ms .. t0-100ms, 1 unit).
	ring := make([]float64, 2+3*size)
	ring[0], ring[1] = 2, 1
	copy(ring[5:], []float64{float64(us - 500*ms), float64(us - 400*ms), 2, float64(us - 300*ms), float64(us - 100*ms), 1})
	sp, err := s.specFor(a)
	if err != nil {
		t.Fatal(err)
	}
	key := s.key(sp, "old")
	if _, err := shared.Do("SET", key, packDoubles(ring)); err != nil {
		t.Fatal(err)
	}
	// The same entries in the compact form, in ns: closed entry 0 is full
	// (deficit 0) and ends 100 ms before entry 1 starts (gap), so merged.
	want := make([]int64, a.Words())
	want[0] = 1<<52 + 1<<18 + 1<<17 + 2
	want[1] = t0 - 100*int64(time.Millisecond)
	want[2], want[3] = t0-500*int64(time.Millisecond), t0-300*int64(time.Millisecond)
	want[2+2*size] = 100 * int64(time.Millisecond)
	b := []store.SyncBatch{{Algorithm: a, Key: "old"}}
	if err := s.Sync(ctx, t0, b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b[0].State, want) {
		t.Fatalf("converted state\nredis %v\nwant  %v", b[0].State, want)
	}
	for i, now := range []int64{t0, t0 + 550*int64(time.Millisecond), t0 + 950*int64(time.Millisecond)} {
		wantD := micros(a.Decide(want, now, 3))
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "old", Cost: 3})
		if err != nil {
			t.Fatal(err)
		}
		if got != wantD {
			t.Fatalf("decision %d\nredis %+v\ngo    %+v", i, got, wantD)
		}
	}
	raw, err := shared.Do("GET", key)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) >= 8 && math.Float64frombits(leUint64(raw)) < 1<<52 {
		t.Fatalf("the key is still in the ring form after a write")
	}
}

func leUint64(s string) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// TestBoundedLogMemoryUsage measures MEMORY USAGE of bounded-log keys at
// 600 per minute, e = 0.05, with a realistic key (prefix, hash tag and a
// client IP): one that took one request (stored as an integer) and one held
// at its limit. The targets are 100 and 400 bytes.
func TestBoundedLogMemoryUsage(t *testing.T) {
	s := newStore(t, Options{ClientTime: true, Prefix: "fg"})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	sp, err := s.specFor(a)
	if err != nil {
		t.Fatal(err)
	}
	usage := func(k string) int {
		out, err := shared.Do("MEMORY", "USAGE", s.key(sp, k), "SAMPLES", "0")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("MEMORY USAGE: %q", out)
		}
		return n
	}
	light := "203.0.113.17"
	if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: light, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	heavy := "203.0.113.18"
	step := int64(time.Minute) / 600
	for i := range int64(1500) { // two and a half windows at exactly the limit
		if _, err := s.DecideOne(ctx, t0+i*step, store.Request{Algorithm: a, Key: heavy, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	l, h := usage(light), usage(heavy)
	t.Logf("MEMORY USAGE: light key %d bytes, key at its limit %d bytes (key name %d bytes)", l, h, len(s.key(sp, light)))
	if l > 100 || h > 400 {
		t.Errorf("MEMORY USAGE light %d (target 100), heavy %d (target 400)", l, h)
	}
}

// TestBoundedLogShortForm checks the integer form of a bounded-log key whose
// units all came at one time: the stored value, that Redis keeps it as an
// integer, and that decisions and synced states read from it match Go's.
func TestBoundedLogShortForm(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	sp, err := s.specFor(a)
	if err != nil {
		t.Fatal(err)
	}
	key := s.key(sp, "one")
	ref := make([]int64, a.Words())
	ms := int64(time.Millisecond)
	for i, step := range []struct {
		at, cost int64
		want     string // the stored value; "" for packed doubles
	}{
		{t0, 2, fmt.Sprintf("2%016d", t0/1000)},
		{t0, 1, fmt.Sprintf("3%016d", t0/1000)},
		{t0 + ms, 1, ""},
		{t0 + 2*int64(time.Minute), 1, fmt.Sprintf("1%016d", (t0+2*int64(time.Minute))/1000)},
	} {
		want := micros(a.Decide(ref, step.at, step.cost))
		got, err := s.DecideOne(ctx, step.at, store.Request{Algorithm: a, Key: "one", Cost: step.cost})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("step %d: redis %+v, go %+v", i, got, want)
		}
		raw, err := shared.Do("GET", key)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := shared.Do("OBJECT", "ENCODING", key)
		if step.want != "" && (raw != step.want || strings.TrimSpace(enc) != "int") {
			t.Fatalf("step %d: stored %q (%s), want %q as an integer", i, raw, strings.TrimSpace(enc), step.want)
		}
		if step.want == "" && len(raw)%8 != 0 {
			t.Fatalf("step %d: stored %q, want packed doubles", i, raw)
		}
		b := []store.SyncBatch{{Algorithm: a, Key: "one"}}
		if err := s.Sync(ctx, step.at, b); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b[0].State, ref) {
			t.Fatalf("step %d: synced state\nredis %v\ngo    %v", i, b[0].State[:4], ref[:4])
		}
	}
}
