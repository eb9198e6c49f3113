package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// logStore returns a store with options o, the default bounded-log at 600
// per minute (e = 0.05) and its spec, as most tests here use them.
func logStore(tb testing.TB, o Options) (*Store, algorithm.Algorithm, *spec) {
	tb.Helper()
	s := newStore(tb, o)
	a := mustAlg(tb, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	sp, err := s.specFor(a)
	if err != nil {
		tb.Fatal(err)
	}
	return s, a, sp
}

// packDoubles packs words as the script stores a state: little-endian
// doubles, trailing zero words left out.
func packDoubles(words []float64) string {
	for len(words) > 0 && words[len(words)-1] == 0 {
		words = words[:len(words)-1]
	}
	return doublesBytes(words)
}

// doublesBytes returns words as little-endian doubles, as struct.pack('<d')
// writes them.
func doublesBytes(words []float64) string {
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
	p, _ := paramsOf(a)
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
// 600 per minute, e = 0.05 (m = 30), with a realistic key (prefix, hash tag
// and a client IP): light keys (at most m units in the window) that took
// one request, requests at different times, a request every 10 s for three
// windows (an entry closed past the window and the open one), and m units
// spread over the window; and a key held at its limit. The targets are 100
// bytes for every light key and 400 for the key at its limit.
func TestBoundedLogMemoryUsage(t *testing.T) {
	s, a, sp := logStore(t, Options{ClientTime: true, Prefix: "fg"})
	ctx := context.Background()
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
	sec := int64(time.Second)
	keys := []struct {
		name, ip   string
		n, step, c int64 // n requests of cost c, step apart
		light      bool
	}{
		{"light, one request", "203.0.113.17", 1, 0, 1, true},
		{"light, 6 requests 10 s apart", "203.0.113.19", 6, 10 * sec, 1, true},
		{"light, a request every 10 s for 3 min", "203.0.113.20", 18, 10 * sec, 1, true},
		{"light, m = 30 units over 58 s", "203.0.113.21", 30, 2 * sec, 1, true},
		{"at its limit for 2.5 windows", "203.0.113.18", 1500, int64(time.Minute) / 600, 1, false},
	}
	for _, k := range keys {
		for i := range k.n {
			if _, err := s.DecideOne(ctx, t0+i*k.step, store.Request{Algorithm: a, Key: k.ip, Cost: k.c}); err != nil {
				t.Fatal(err)
			}
		}
		u := usage(k.ip)
		t.Logf("MEMORY USAGE %-40s %3d bytes, stored %s (key name %d bytes)", k.name+":", u, storedForm(t, s.key(sp, k.ip)), len(s.key(sp, k.ip)))
		if k.light && u > 100 || u > 400 {
			t.Errorf("MEMORY USAGE of %s: %d bytes (targets: 100 light, 400 at the limit)", k.name, u)
		}
	}
	// Keys built by Sync alone (the delayed arrangement): one node pushing
	// its events in time order, then several nodes, each taking a random
	// share of the events and pushing what it took every interval on its
	// own phase, so that most pushes carry events older than the newest the
	// store has (late events). The light key keeps one event every 10 s;
	// the heavy one is at its limit's even rate.
	for _, k := range []struct {
		name, ip     string
		n, step      int64 // n events step apart
		nodes, every int64 // nodes pushing every interval
		light        bool
	}{
		{"by Sync, 1 node: an event every 10 s for 3 min", "203.0.113.30", 18, 10 * sec, 1, 10 * sec, true},
		{"by Sync, 1 node: at its limit for 2.5 windows", "203.0.113.31", 1500, int64(time.Minute) / 600, 1, 10 * sec, false},
		{"by Sync, 8 nodes: an event every 10 s for 3 min", "203.0.113.32", 18, 10 * sec, 8, sec, true},
		{"by Sync, 8 nodes: at its limit for 2.5 windows", "203.0.113.33", 1500, int64(time.Minute) / 600, 8, sec / 5, false},
	} {
		t.Run(k.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(k.n), uint64(k.nodes)))
			pending := make([][]store.Event, k.nodes)
			phase := make([]int64, k.nodes)
			for i := range phase {
				phase[i] = rng.Int64N(k.every)
			}
			next := func(i int, at int64) int64 { // node i's first push after at
				return at - (at-phase[i])%k.every + k.every
			}
			push := func(i int, at int64) {
				if len(pending[i]) == 0 {
					return
				}
				b := []store.SyncBatch{{Algorithm: a, Key: k.ip, Events: pending[i]}}
				if err := s.Sync(ctx, at, b); err != nil {
					t.Fatal(err)
				}
				pending[i] = nil
			}
			due := make([]int64, k.nodes)
			for i := range due {
				due[i] = t0 + phase[i]
			}
			flush := func(upTo int64) { // every push due by upTo, in time order
				for {
					i := 0
					for j := range due {
						if due[j] < due[i] {
							i = j
						}
					}
					if due[i] > upTo {
						return
					}
					push(i, due[i])
					due[i] = next(i, due[i])
				}
			}
			for j := range k.n {
				at := t0 + phase[0] + 1 + j*k.step
				flush(at)
				i := rng.IntN(int(k.nodes))
				pending[i] = append(pending[i], store.Event{Time: at, Cost: 1})
			}
			flush(t0 + k.n*k.step + 2*k.every)
			u := usage(k.ip)
			t.Logf("MEMORY USAGE %-48s %3d bytes, stored %s", k.name+":", u, storedForm(t, s.key(sp, k.ip)))
			if k.light && u > 100 || u > 400 {
				t.Errorf("MEMORY USAGE of %s: %d bytes (targets: 100 light, 400 at the limit)", k.name, u)
			}
		})
	}
}

// storedForm returns which form the script stored key in: "short" (the
// positive integer of a state whose units came at one time), "light" (the
// negative integer of a light state), "merged" (a merged state's 32-bit
// fields), "merged doubles" (a merged state's doubles without the zeros),
// "doubles" or "" (no key). It fails the test if an integer form is not
// kept in Redis's integer encoding.
func storedForm(t *testing.T, key string) string {
	t.Helper()
	raw, err := shared.Do("GET", key)
	if err != nil || raw == "" {
		return ""
	}
	form := "doubles"
	switch {
	case len(raw)%8 == 5 && (raw[len(raw)-1] == 'c' || raw[len(raw)-1] == 'C'):
		return "merged" // a merged state's 32-bit fields
	case len(raw)%8 == 1 && (raw[len(raw)-1] == 'm' || raw[len(raw)-1] == 'M'):
		return "merged doubles" // a merged state's doubles without the zeros
	case strings.HasPrefix(raw, "-"):
		form = "light"
	case raw[0] >= '1' && raw[0] <= '9' && len(raw)%8 != 0:
		form = "short"
	}
	if form != "doubles" {
		if _, err := strconv.ParseInt(raw, 10, 64); err != nil {
			t.Fatalf("stored %q: %v", raw, err)
		}
		if enc, _ := shared.Do("OBJECT", "ENCODING", key); strings.TrimSpace(enc) != "int" {
			t.Fatalf("stored %q with encoding %s, want int", raw, enc)
		}
	} else if len(raw)%8 != 0 {
		t.Fatalf("stored %q: neither an integer form nor doubles", raw)
	}
	return form
}

// TestBoundedLogIntegerForms walks one key (600 per minute, e = 0.05: m =
// 30) through every stored form and the transitions between them: one
// time (short), units at different times (light, one entry), m units
// (light), more than m (doubles), back under m with a closed entry older
// than W (light, two entries), merges into the open entry (light) and into
// a new one (doubles), one time again, and a clock that
// stepped back further than the light form's range (doubles, then light
// again). Every decision and every synced state must match Go's.
func TestBoundedLogIntegerForms(t *testing.T) {
	s, a, sp := logStore(t, Options{ClientTime: true})
	ctx := context.Background()
	key := s.key(sp, "one")
	ref := make([]int64, a.Words())
	ms, sec := int64(time.Millisecond), int64(time.Second)
	for i, step := range []struct {
		at, cost int64
		merge    bool // Sync an event at .at instead of deciding
		want     string
		value    string // the stored value, when it is checked
	}{
		{at: t0, cost: 2, want: "short", value: fmt.Sprintf("2%016d", t0/1000)},
		{at: t0, cost: 1, want: "short", value: fmt.Sprintf("3%016d", t0/1000)},
		// X = 1 + (4-1)*W + 1000 µs, r = 2, Z = 10^7 + r*X, t mod 2e9 µs = 1000.
		{at: t0 + ms, cost: 1, want: "light", value: "-370002002000001000"},
		{at: t0 + 30*sec, cost: 26, want: "light"},
		{at: t0 + 50*sec, cost: 1, want: "doubles"},
		{at: t0 + 65*sec, cost: 1, want: "light"},
		{at: t0 + 52*sec, cost: 3, merge: true, want: "light"},  // into the open entry
		{at: t0 + 70*sec, cost: 3, merge: true, want: "merged"}, // a new entry
		{at: t0 + 200*sec, cost: 1, want: "short"},
		{at: t0 + 201*sec, cost: 1, want: "light"},
		{at: t0 + 201*sec - 10*int64(time.Minute), cost: 1, want: "doubles"},
		{at: t0 + 202*sec, cost: 1, want: "light"},
		{at: t0 + 261*sec, cost: 1, want: "light"}, // two entries
		{at: t0 + 262*sec, cost: 40, want: "doubles"},
		{at: t0 + 321*sec, cost: 1, want: "light"},
		{at: t0 + 500*sec, cost: 30, want: "short"},
	} {
		if step.merge {
			a.Record(ref, step.at, step.cost)
			b := []store.SyncBatch{{Algorithm: a, Key: "one", Events: []store.Event{{Time: step.at, Cost: step.cost}}}}
			if err := s.Sync(ctx, step.at, b); err != nil {
				t.Fatal(err)
			}
		} else {
			want := micros(a.Decide(ref, step.at, step.cost))
			got, err := s.DecideOne(ctx, step.at, store.Request{Algorithm: a, Key: "one", Cost: step.cost})
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("step %d: redis %+v, go %+v", i, got, want)
			}
		}
		if form := storedForm(t, key); form != step.want {
			raw, _ := shared.Do("GET", key)
			t.Fatalf("step %d: stored %q (%s), want %s", i, raw, form, step.want)
		}
		if raw, _ := shared.Do("GET", key); step.value != "" && raw != step.value {
			t.Fatalf("step %d: stored %q, want %q", i, raw, step.value)
		}
		b := []store.SyncBatch{{Algorithm: a, Key: "one"}}
		if err := s.Sync(ctx, step.at, b); err != nil {
			t.Fatal(err)
		}
		if !sameState(a, b[0].State, ref) {
			t.Fatalf("step %d: synced state\nredis %v\ngo    %v", i, b[0].State[:5], ref[:5])
		}
	}
}

// mergedDoubles returns the merged doubles form ('m') of the full layout
// words (times in microseconds) of a merged bounded-log state: the header,
// the newest time, the n firsts, the n - 1 deficits and the n - 1 gaps as
// doubles, then the byte 'm'.
func mergedDoubles(a algorithm.Algorithm, words []float64) string {
	p, _ := paramsOf(a)
	size := int(p.Entries)
	n := int(int64(words[0]) & (1<<17 - 1))
	w := slices.Clone(words[:2+n])
	w = append(w, words[2+size:2+size+n-1]...)
	w = append(w, words[2+2*size:2+2*size+n-1]...)
	return doublesBytes(w) + "m"
}

// TestBoundedLogCompactDoublesKept stores states the way the script wrote
// them before the integer forms and the short merged form (packed doubles
// of the full layout: one entry, two entries whose older one is past the
// window, and a state merged from late events; then that merged state in
// the merged doubles form) and checks that they keep working: the first
// decision on each matches Go's on the same state, and the write it makes
// stores the newer form.
func TestBoundedLogCompactDoublesKept(t *testing.T) {
	s, a, sp := logStore(t, Options{ClientTime: true})
	ctx := context.Background()
	sec := int64(time.Second)
	// A full entry, a later one, then a late event inside the full one.
	merged := make([]int64, a.Words())
	for _, e := range [][2]int64{{t0 + 20*sec, 30}, {t0 + 45*sec, 2}, {t0 + 30*sec, 1}} {
		a.Record(merged, e[0], e[1])
	}
	if merged[0]&(1<<17) == 0 {
		t.Fatalf("the events did not make a merged state: %v", merged[:6])
	}
	for i, c := range []struct {
		st   []int64
		want string
	}{
		{[]int64{1<<52 + 3<<18 + 1, t0 + 20*sec, t0}, "light"},
		{[]int64{1<<52 + 2<<18 + 2, t0 + 70*sec, t0, t0 + 65*sec}, "light"},
		{merged, "merged"},
		{merged, "merged"}, // stored in the merged doubles form below
	} {
		k := fmt.Sprint("old", i)
		words := make([]float64, len(c.st))
		for j, w := range c.st {
			if sp.timeIdx[j] {
				w /= 1000
			}
			words[j] = float64(w)
		}
		value := packDoubles(words)
		if i == 3 {
			value = mergedDoubles(a, words)
		}
		if _, err := shared.Do("SET", s.key(sp, k), value); err != nil {
			t.Fatal(err)
		}
		ref := make([]int64, a.Words())
		copy(ref, c.st)
		now := t0 + 75*sec
		want := micros(a.Decide(ref, now, 1))
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: k, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("state %d: redis %+v, go %+v", i, got, want)
		}
		if form := storedForm(t, s.key(sp, k)); form != c.want {
			t.Fatalf("state %d: stored as %s after a write, want %s", i, form, c.want)
		}
		b := []store.SyncBatch{{Algorithm: a, Key: k}}
		if err := s.Sync(ctx, now, b); err != nil {
			t.Fatal(err)
		}
		if !sameState(a, b[0].State, ref) {
			t.Fatalf("state %d: synced\nredis %v\ngo    %v", i, b[0].State, ref)
		}
	}
}

// TestBoundedLogIntegerServerTime checks the light form with the server's
// clock, where a merge reads TIME to place the stored time: two requests a
// little apart are stored as a light integer, and Sync gets back one entry
// of 2 units whose times lie within the test's wall clock.
func TestBoundedLogIntegerServerTime(t *testing.T) {
	s, a, sp := logStore(t, Options{})
	ctx := context.Background()
	before := time.Now().UnixMicro() * 1000
	for range 2 {
		if d, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: "srv", Cost: 1}); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	after := time.Now().UnixMicro()*1000 + 1000
	if form := storedForm(t, s.key(sp, "srv")); form != "light" {
		t.Fatalf("stored as %s, want light", form)
	}
	b := []store.SyncBatch{{Algorithm: a, Key: "srv"}}
	if err := s.Sync(ctx, 0, b); err != nil {
		t.Fatal(err)
	}
	st := b[0].State
	if st[0] != 1<<52+2<<18+1 || st[2] >= st[1] || st[2] < before-time.Second.Nanoseconds() || st[1] > after+time.Second.Nanoseconds() {
		t.Fatalf("synced %v, want one entry of 2 units between %d and %d", st[:4], before, after)
	}
}

// sameState reports whether a state synced from Redis is the Go reference
// state, for bounded-log up to the one word the script may store
// differently: the first timestamp of the oldest entry when that entry
// holds at least m units (full, or more after late events) and is at or
// before the newest timestamp less W in both. Every later
// decision and merge cuts at or after newest - W and reads no more from
// that timestamp than that it is at or before the cut (see blint in
// lua/boundedlog.lua), so the two states decide and merge alike; the
// differential tests check that on every later step.
func sameState(a algorithm.Algorithm, got, want []int64) bool {
	if slices.Equal(got, want) {
		return true
	}
	p, _ := paramsOf(a)
	if p.Name != algorithm.BoundedLog || len(got) != len(want) || len(got) < 3 {
		return false
	}
	w := int64(a.Config().Window)
	dead := func(s []int64) bool {
		h := s[0]
		n, merged := h&(1<<17-1), h&(1<<17) != 0
		return h >= 1<<52 && n >= 2 && (!merged || s[2+p.Entries] <= 0) && s[2] <= s[1]-w
	}
	if !dead(got) || !dead(want) {
		return false
	}
	g, r := slices.Clone(got), slices.Clone(want)
	g[2], r[2] = 0, 0
	return slices.Equal(g, r)
}

// TestBoundedLogIntegerGarbage stores integers no script wrote in a
// bounded-log key (any length, either sign) and checks that the script
// either reads them as a valid state, deciding as Go does on the state Sync
// returns, or reports the value as foreign; it never fails otherwise.
func TestBoundedLogIntegerGarbage(t *testing.T) {
	s, a, sp := logStore(t, Options{ClientTime: true})
	rng := rand.New(rand.NewPCG(5, 10))
	read := 0
	for i := range 300 {
		v := strconv.FormatInt(rng.Int64()>>rng.IntN(63), 10)
		if i%2 == 0 {
			v = "-" + v
		}
		if storedDecidesLikeGo(t, s, a, sp, fmt.Sprint("g", i), v) {
			read++
		}
	}
	t.Logf("%d of 300 foreign integers read as states, the rest reported", read)
}

// storedDecidesLikeGo stores value in key as a raw Redis value and checks
// that the script either reports it as foreign or reads it as a state on
// which it decides as Go does. It reports whether the value was read.
func storedDecidesLikeGo(t *testing.T, s *Store, a algorithm.Algorithm, sp *spec, key, value string) bool {
	t.Helper()
	ctx := context.Background()
	if _, err := shared.Do("SET", s.key(sp, key), value); err != nil {
		t.Fatal(err)
	}
	b := []store.SyncBatch{{Algorithm: a, Key: key}}
	if err := s.Sync(ctx, t0, b); err != nil {
		if !strings.Contains(err.Error(), "another program or version") {
			t.Fatalf("value %q: %v", value, err)
		}
		return false
	}
	st := slices.Clone(b[0].State)
	want := micros(a.Decide(st, t0, 1))
	got, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: key, Cost: 1})
	if err != nil || got != want {
		t.Fatalf("value %q read as %v: redis %+v %v, go %+v", value, b[0].State[:4], got, err, want)
	}
	return true
}

// FuzzBoundedLogIntegerValue stores any string of digits and minus signs
// (up to 20 bytes: integers in and out of Redis's range, non-canonical
// ones, lone signs) in a bounded-log key. The script must either report it
// as foreign or read it as a valid state on which it decides as Go does.
func FuzzBoundedLogIntegerValue(f *testing.F) {
	for _, v := range []string{"-360002002000001000", "11764470000000000", "-1", "-0001234567890", "--1",
		"-9223372036854775808", "-9223372035999999999", "9223372036854775807", "-", "12345678", "-1234567"} {
		f.Add(v)
	}
	s, a, sp := logStore(f, Options{ClientTime: true})
	f.Fuzz(func(t *testing.T, v string) {
		if v == "" || len(v) > 20 || strings.Trim(v, "-0123456789") != "" {
			t.Skip()
		}
		storedDecidesLikeGo(t, s, a, sp, "fuzz", v)
	})
}

// TestBoundedLogDeadFirstIgnored checks, in Go alone, the claim sameState
// rests on: a bounded-log state whose oldest entry holds at least m units
// and starts at or before newest - W decides and merges exactly as the same
// state with that first timestamp set to newest - W, as the script stores
// it. Two copies
// run the same random trace (decisions at times that step back now and
// then, late and current merges); the second is rewritten that way after
// every step. Every decision must match, and the states stay sameState.
func TestBoundedLogDeadFirstIgnored(t *testing.T) {
	for _, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
		{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
		{Algorithm: algorithm.BoundedLog, Limit: 5, Window: 700 * time.Millisecond, Tolerance: 0.01},
		{Algorithm: algorithm.BoundedLog, Limit: 7, Window: 3 * time.Second, Tolerance: 0.5},
	} {
		a := mustAlg(t, c)
		p, _ := paramsOf(a)
		w := int64(c.Window)
		rng := rand.New(rand.NewPCG(uint64(c.Limit), 11))
		orig, canon := make([]int64, a.Words()), make([]int64, a.Words())
		now, rewritten := t0, 0
		for step := range 20000 {
			switch r := rng.IntN(100); {
			case r < 3:
				now -= rng.Int64N(w / 5)
			case r < 10:
				now += rng.Int64N(2 * w)
			default:
				now += rng.Int64N(2*w/c.Limit + 1)
			}
			if rng.IntN(8) == 0 {
				at, cost := now+w/10-rng.Int64N(w+w/5), 1+rng.Int64N(3) // late, some a little ahead
				a.Record(orig, at, cost)
				a.Record(canon, at, cost)
			} else {
				cost := 1 + rng.Int64N(min(c.Limit, 4))
				if d1, d2 := a.Decide(orig, now, cost), a.Decide(canon, now, cost); d1 != d2 {
					t.Fatalf("%v step %d: %+v on the original, %+v on the rewritten state", c, step, d1, d2)
				}
			}
			if !sameState(a, canon, orig) {
				t.Fatalf("%v step %d:\nrewritten %v\noriginal  %v", c, step, canon[:6], orig[:6])
			}
			h := canon[0]
			n, merged := h&(1<<17-1), h&(1<<17) != 0
			if h >= 1<<52 && n >= 2 && (!merged || canon[2+p.Entries] <= 0) && canon[2] <= canon[1]-w && canon[2] != canon[1]-w {
				canon[2] = canon[1] - w
				rewritten++
			}
		}
		if rewritten < 50 {
			t.Errorf("%v: only %d rewrites; the trace does not exercise the claim", c, rewritten)
		}
		t.Logf("%v: %d rewrites", c, rewritten)
	}
}

// FuzzBoundedLogMergedValue stores 3k finite doubles followed by 'm' (the
// merged form's shape) in a bounded-log key, the header made merged with n
// = k so that most values reach the expansion. The script must report the
// value as foreign or read it as a state on which it decides as Go does.
func FuzzBoundedLogMergedValue(f *testing.F) {
	f.Add(uint8(1), int64(1e15), int64(1e15), int64(29), int64(1e6))
	f.Add(uint8(3), int64(1_764_470_000_000_000), int64(1_764_469_990_000_000), int64(0), int64(-5))
	s, a, sp := logStore(f, Options{ClientTime: true})
	f.Fuzz(func(t *testing.T, n uint8, newest, first, deficit, gap int64) {
		k := int(n%50) + 1
		words := []float64{float64(1<<52 + 1<<18 + 1<<17 + int64(k)), float64(newest % (1 << 53))}
		for i := range k {
			words = append(words, float64((first+int64(i)*1000)%(1<<53)))
		}
		for range k - 1 {
			words = append(words, float64(deficit%(1<<53)))
		}
		for range k - 1 {
			words = append(words, float64(gap%(1<<53)))
		}
		storedDecidesLikeGo(t, s, a, sp, "fuzzm", doublesBytes(words)+"m")
	})
}

// TestBoundedLogMergedDoublesFallback checks the merged states whose fields
// do not fit the short merged form: entries more than 71 minutes apart (a
// two-hour window) and a closed entry holding more than 2m units (a full
// ring). Each is stored in the merged doubles form, and decisions and
// synced states match Go's.
func TestBoundedLogMergedDoublesFallback(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	ms, minute := int64(time.Millisecond), int64(time.Minute)
	for _, c := range []struct {
		name   string
		cfg    algorithm.Config
		events [][2]int64 // time after t0, cost
		form   string
	}{
		{"entries 80 minutes apart", algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 20, Window: 2 * time.Hour, Tolerance: 0.1},
			[][2]int64{{0, 2}, {80 * minute, 1}, {40 * minute, 1}}, "merged doubles"},
		{"a closed entry above 2m", algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 5, Window: time.Second, Tolerance: 0.2},
			[][2]int64{{0, 1}, {10 * ms, 1}, {20 * ms, 1}, {30 * ms, 1}, {40 * ms, 1}, {50 * ms, 1}, {60 * ms, 1},
				{70 * ms, 1}, {80 * ms, 1}, {90 * ms, 1}, {100 * ms, 1}, {110 * ms, 1}, {15 * ms, 1}, {15 * ms, 1}}, "merged doubles"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := mustAlg(t, c.cfg)
			sp, err := s.specFor(a)
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]int64, a.Words())
			now := t0
			for _, e := range c.events {
				a.Record(ref, t0+e[0], e[1])
				now = max(now, t0+e[0])
				b := []store.SyncBatch{{Algorithm: a, Key: c.name, Events: []store.Event{{Time: t0 + e[0], Cost: e[1]}}}}
				if err := s.Sync(ctx, now, b); err != nil {
					t.Fatal(err)
				}
				if !sameState(a, b[0].State, ref) {
					t.Fatalf("%s: synced\nredis %v\ngo    %v", c.name, b[0].State[:8], ref[:8])
				}
			}
			if ref[0]&(1<<17) == 0 {
				t.Fatalf("%s: the events did not make a merged state: %v", c.name, ref[:8])
			}
			if form := storedForm(t, s.key(sp, c.name)); form != c.form {
				t.Fatalf("%s: stored as %s, want %s", c.name, form, c.form)
			}
			want := micros(a.Decide(ref, now+ms, 1))
			got, err := s.DecideOne(ctx, now+ms, store.Request{Algorithm: a, Key: c.name, Cost: 1})
			if err != nil || got != want {
				t.Fatalf("%s: redis %+v %v, go %+v", c.name, got, err, want)
			}
		})
	}
}

// FuzzBoundedLogMergedShortValue stores a value of the short merged form's
// shape (a merged header for k entries and a newest time as doubles, 2k - 1
// 32-bit fields, then 'c') in a bounded-log key. The script must report the
// value as foreign or read it as a state on which it decides as Go does.
func FuzzBoundedLogMergedShortValue(f *testing.F) {
	f.Add(uint8(2), int64(1_764_470_000_000_000), uint32(5_000_000), uint32(0), uint32(31*100_000))
	f.Add(uint8(5), int64(1e15), uint32(1), uint32(29), uint32(1<<32-1))
	s, a, sp := logStore(f, Options{ClientTime: true})
	f.Fuzz(func(t *testing.T, n uint8, newest int64, first, step, field uint32) {
		k := int(n%44) + 1
		var b strings.Builder
		b.WriteString(doublesBytes([]float64{float64(1<<52 + 1<<18 + 1<<17 + int64(k)), float64(newest % (1 << 53))}))
		for i := range 2*k - 1 {
			v := first - uint32(i)*step
			if i >= k {
				v = field + uint32(i)
			}
			for j := 0; j < 4; j++ {
				b.WriteByte(byte(v >> (8 * j)))
			}
		}
		b.WriteByte('c')
		storedDecidesLikeGo(t, s, a, sp, "fuzzc", b.String())
	})
}

// sharedAndAlone decides reqs (at nows, at least two) in one shared script
// call (op 'i'), and the same requests on twin keys ("twin-" + key) one by
// one, each in a call of its own (op 'd', the generic load, decide and
// save), and requires the same decisions and, for every key named, the same
// stored value byte for byte: op 'i' writes what the generic path writes.
// It returns the shared call's decisions.
func sharedAndAlone(t *testing.T, s *Store, nows []int64, reqs []store.Request) []algorithm.Decision {
	t.Helper()
	if len(reqs) < 2 {
		t.Fatal("sharedAndAlone needs two requests or more: one is decided alone")
	}
	got := sharedCall(t, s, nows, reqs)
	for i, r := range reqs {
		sp, err := s.specFor(r.Algorithm)
		if err != nil {
			t.Fatal(err)
		}
		tw := r
		tw.Key = "twin-" + r.Key
		d, err := s.decideAlone(context.Background(), nows[i], tw, sp, s.key(sp, tw.Key))
		if err != nil {
			t.Fatal(err)
		}
		if d != got[i] {
			t.Fatalf("decision %d of %d (key %s, cost %d): op i %+v, op d %+v", i, len(reqs), r.Key, r.Cost, got[i], d)
		}
	}
	for _, r := range reqs {
		sp, _ := s.specFor(r.Algorithm)
		v, err1 := shared.Do("GET", s.key(sp, r.Key))
		w, err2 := shared.Do("GET", s.key(sp, "twin-"+r.Key))
		if err1 != nil || err2 != nil || v != w {
			t.Fatalf("key %s stored %q (%v) by op i, %q (%v) by op d", r.Key, v, err1, w, err2)
		}
	}
	return got
}

// blForm names the stored form of bounded-log key (user key k, Redis key
// rk) and its entries: "none", "short", "light-1", "light-2", "doubles-n"
// or "merged" (either merged form); the entries come from the state Sync
// reads at now.
func blForm(t *testing.T, s *Store, a algorithm.Algorithm, k, rk string, now int64) string {
	t.Helper()
	// Not storedForm: a one-time form of more than 922 units is above
	// Redis's integer range, so not kept in its integer encoding.
	raw, err := shared.Do("GET", rk)
	switch {
	case err != nil || raw == "":
		return "none"
	case strings.ContainsRune("cmCM", rune(raw[len(raw)-1])) && len(raw)%8 != 0:
		return "merged"
	case raw[0] >= '1' && raw[0] <= '9' && len(raw)%8 != 0:
		return "short"
	}
	b := []store.SyncBatch{{Algorithm: a, Key: k}}
	if err := s.Sync(context.Background(), now, b); err != nil {
		t.Fatal(err)
	}
	n := b[0].State[0] & (1<<17 - 1)
	if raw[0] == '-' {
		return fmt.Sprint("light-", n)
	}
	return fmt.Sprint("doubles-", n)
}

// TestSharedBoundedLogForms runs random traces of bounded-log decisions
// through shared calls (op 'i', which decides light keys inline) with
// ClientTime, for limits whose light keys are stored as integers (m = 30,
// 3, 2, 1) and one too large for the light integer form (doubles). Each
// call's decisions, the stored values and the states Sync reads must be
// what op 'd' (the generic path, on twin keys) and Go's algorithm give.
// Times step by nothing, a little, past an entry's span, past the window,
// onto a time the key's state holds plus W (and a microsecond either side),
// past the light form's range and back; costs are 0, 1, several, m, over
// m, the limit and over it; merges (in order and late, which make merged
// states) come in between. The test requires every form transition that
// op 'i' handles inline, and those it hands to the generic path, to have
// happened.
func TestSharedBoundedLogForms(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	seen := map[string]int{}
	for ci, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
		{Algorithm: algorithm.BoundedLog, Limit: 7, Window: 3 * time.Second, Tolerance: 0.5},
		{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Second, Tolerance: 0.1},
		{Algorithm: algorithm.BoundedLog, Limit: 5, Window: 700 * time.Millisecond, Tolerance: 0.01},
		{Algorithm: algorithm.BoundedLog, Limit: 1000000, Window: time.Second},
	} {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			sp, err := s.specFor(a)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := paramsOf(a)
			m, limit, w := p.EntryUnits, c.Limit, int64(c.Window)
			ref := &goRef{alg: a, states: map[string][]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 24))
			keys := []string{"a", "b", "c", "d"}
			now := t0
			// Redis drops a key its TTL after its last write; with a
			// virtual clock the test does that (and clears Go's state) when
			// a key has not been written for its TTL of virtual time, as a
			// light key read much later than any live key could be is not
			// read exactly (see blint in lua/boundedlog_light.lua).
			written := map[string]int64{}
			expire := func(key string) {
				if at, ok := written[key]; ok && now-at > sp.ttlMS*int64(time.Millisecond) {
					for _, k := range []string{key, "twin-" + key} {
						if _, err := shared.Do("DEL", s.key(sp, k)); err != nil {
							t.Fatal(err)
						}
					}
					clear(ref.state(key))
					delete(written, key)
				}
			}
			for step := range 250 {
				if rng.IntN(12) == 0 {
					// A merge into key and its twin: in order or late.
					key := keys[rng.IntN(len(keys))]
					at := (now - rng.Int64N(w+1)) / 1000 * 1000
					if rng.IntN(2) == 0 {
						at = now
					}
					expire(key)
					written[key] = now
					ev := []store.Event{{Time: at, Cost: 1 + rng.Int64N(m+1)}}
					a.Record(ref.state(key), at, ev[0].Cost)
					b := []store.SyncBatch{{Algorithm: a, Key: key, Events: ev}, {Algorithm: a, Key: "twin-" + key, Events: ev}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					if !sameState(a, b[0].State, ref.state(key)) || !sameState(a, b[1].State, ref.state(key)) {
						t.Fatalf("step %d: merged %v:\nredis %v\ntwin  %v\ngo    %v", step, ev, b[0].State[:5], b[1].State[:5], ref.state(key)[:5])
					}
				}
				n := 2 + rng.IntN(4)
				// Mostly distinct keys, so each one's form before and after
				// its decision is seen; sometimes one key twice.
				order := rng.Perm(len(keys))
				nows := make([]int64, n)
				reqs := make([]store.Request, n)
				want := make([]algorithm.Decision, n)
				before := map[string]string{}
				jumped := false
				for i := range n {
					key := keys[order[i%len(keys)]]
					if rng.IntN(8) == 0 && i > 0 {
						key = reqs[i-1].Key
					}
					switch r := rng.IntN(100); {
					case r < 15:
						// On a boundary of key's state, or a microsecond
						// either side: its newest time or an entry's first
						// time, plus W.
						st := ref.state(key)
						if e := st[0] & (1<<17 - 1); st[0] != 0 {
							at := st[1]
							if j := rng.Int64N(e + 1); j < e {
								at = st[2+j]
							}
							now = at + w + (rng.Int64N(3)-1)*1000
						}
					case r < 30: // the same time: one entry at one time
					case r < 60:
						now += rng.Int64N(w/limit+1) + 1
					case r < 78:
						now += rng.Int64N(w/max(limit/m, 1)+1) + 1 // about an entry's span
					case r < 88:
						now += w + rng.Int64N(w/2+1) // past the window
					case r < 92 && !jumped:
						now += 300 * time.Second.Nanoseconds() // past the light form's range at 600/min
						jumped = true
					case r < 96:
						now -= rng.Int64N(w/2 + 1) // the clock steps back a little
					default:
						now -= min(rng.Int64N(2*w+1), 9*int64(time.Minute)) // and further
					}
					now = now / 1000 * 1000 // whole microseconds, as the script keeps them
					cost := int64(1)
					switch r := rng.IntN(100); {
					case r < 3:
						cost = 0
					case r < 6:
						cost = limit + 1
					case r < 9:
						cost = limit
					case r < 15:
						cost = m
					case r < 25:
						cost = m + 1 + rng.Int64N(m+1)
					case r < 40:
						cost = 1 + rng.Int64N(m)
					case r < 45:
						cost = 1 + rng.Int64N(limit)
					}
					if _, ok := before[key]; !ok && !slices.ContainsFunc(reqs[:i], func(r store.Request) bool { return r.Key == key }) {
						expire(key)
						before[key] = blForm(t, s, a, key, s.key(sp, key), now)
					}
					nows[i], reqs[i] = now, store.Request{Algorithm: a, Key: key, Cost: cost}
					want[i] = micros(a.Decide(ref.state(key), now, cost))
					if want[i].Allowed {
						written[key] = now
					}
				}
				got := sharedAndAlone(t, s, nows, reqs)
				named := map[string]int{}
				for i := range n {
					named[reqs[i].Key]++
					if got[i] != want[i] {
						t.Fatalf("step %d, decision %d of %d (key %s, cost %d, at +%v):\nredis %+v\ngo    %+v",
							step, i, n, reqs[i].Key, reqs[i].Cost, time.Duration(nows[i]-t0), got[i], want[i])
					}
					if !got[i].Allowed {
						seen["reason "+string(got[i].Reason)]++
					}
				}
				for i, r := range reqs {
					if named[r.Key] != 1 || !got[i].Allowed {
						continue
					}
					after := blForm(t, s, a, r.Key, s.key(sp, r.Key), nows[i])
					seen[before[r.Key]+" > "+after]++
				}
				for _, key := range keys {
					expire(key)
					b := []store.SyncBatch{{Algorithm: a, Key: key}}
					if err := s.Sync(ctx, now, b); err != nil {
						t.Fatal(err)
					}
					if !sameState(a, b[0].State, ref.state(key)) {
						t.Fatalf("step %d: state of %s:\nredis %v\ngo    %v", step, key, b[0].State[:6], ref.state(key)[:6])
					}
				}
			}
		})
	}
	t.Logf("seen: %v", seen)
	for _, want := range []string{
		"none > short", "short > short", "short > light-1", "light-1 > light-1", "light-1 > light-2",
		"light-2 > light-2", "light-1 > short", "light-2 > short", "light-1 > doubles-2", "short > doubles-2",
		"doubles-2 > light-2", "doubles-2 > doubles-3", "none > doubles-2", "short > doubles-1",
		"doubles-1 > doubles-1", "doubles-1 > doubles-2", "doubles-2 > doubles-2", "doubles-2 > doubles-1",
		"merged > merged", "merged > short",
		"reason " + string(algorithm.ReasonOverLimit), "reason " + string(algorithm.ReasonCostOverLimit),
		"reason " + string(algorithm.ReasonBadCost),
	} {
		if seen[want] == 0 {
			t.Errorf("no decision made the transition %q", want)
		}
	}
}

// serverMicros returns the Redis server's clock (TIME) in microseconds.
func serverMicros(t *testing.T, s *Store) int64 {
	t.Helper()
	client, err := s.connect()
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.Do(context.Background(), client.B().Time().Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	us, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME: %v", v)
	}
	return sec*1e6 + us
}

// TestSharedBoundedLogServerTime runs bounded-log decisions through shared
// calls on the Redis server's clock (no ClientTime), where op 'i' reads TIME
// once for the call. The call's time is not known, only that it lies
// between two TIME readings around it; the test requires that some
// microsecond in that range gives, in Go, every decision of the call and
// every state Sync then reads. Pauses of up to most of a window between
// calls (a 40 ms window) let entries close and leave the window; a key idle
// for longer than its TTL is gone from Redis and starts empty.
func TestSharedBoundedLogServerTime(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	for ci, c := range []algorithm.Config{
		{Algorithm: algorithm.BoundedLog, Limit: 4, Window: 40 * time.Millisecond, Tolerance: 0.5},
		{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
		{Algorithm: algorithm.BoundedLog, Limit: 1000000, Window: time.Second},
	} {
		t.Run(name(c), func(t *testing.T) {
			a := mustAlg(t, c)
			ref := &goRef{alg: a, states: map[string][]int64{}}
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			keys := []string{"a", "b"}
			lastAt := map[string]int64{} // µs of the last call deciding on a key
			m := a.Config().Limit
			if p, ok := paramsOf(a); ok {
				m = p.EntryUnits
			}
			for step := range 40 {
				if c.Window < time.Second && step == 20 {
					time.Sleep(c.Window + 1200*time.Millisecond) // past the keys' TTL, as a loaded machine may pause
				}
				if c.Window < time.Second && rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(c.Window) * 3 / 4))) // let the server's clock move on
				}
				n := 2 + rng.IntN(3)
				reqs := make([]store.Request, n)
				for i := range reqs {
					cost := int64(1)
					if rng.IntN(4) == 0 {
						cost = 1 + rng.Int64N(2*m+1)
					}
					reqs[i] = store.Request{Algorithm: a, Key: keys[rng.IntN(len(keys))], Cost: cost}
				}
				from := serverMicros(t, s)
				got := sharedCall(t, s, make([]int64, n), reqs)
				to := serverMicros(t, s)
				synced := make([][]int64, len(keys))
				for j, key := range keys {
					b := []store.SyncBatch{{Algorithm: a, Key: key}}
					if err := s.Sync(ctx, 0, b); err != nil {
						t.Fatal(err)
					}
					synced[j] = slices.Clone(b[0].State)
				}
				// A key left idle for longer than its window may be gone from
				// Redis (its TTL is the window plus a second, which a loaded
				// machine can spend between two steps): it then starts from an
				// empty state, which decides as the idle one does.
				var idle []bool
				for _, key := range keys {
					last, ok := lastAt[key]
					idle = append(idle, ok && from-last > c.Window.Microseconds())
				}
				found := false
				for mask := 0; mask < 1<<len(keys) && !found; mask++ {
					emptied := false // the mask empties a key that was not idle
					for j := range keys {
						emptied = emptied || mask&(1<<j) != 0 && !idle[j]
					}
					if emptied {
						continue
					}
					for at := from; at <= to && !found; at++ {
						try := map[string][]int64{}
						for j, key := range keys {
							if mask&(1<<j) != 0 {
								try[key] = make([]int64, a.Words())
							} else {
								try[key] = slices.Clone(ref.state(key))
							}
						}
						found = true
						for i, r := range reqs {
							if micros(a.Decide(try[r.Key], at*1000, r.Cost)) != got[i] {
								found = false
								break
							}
						}
						for j, key := range keys {
							found = found && sameState(a, synced[j], try[key])
						}
						if found {
							ref.states = try
							for _, r := range reqs {
								lastAt[r.Key] = at
							}
						}
					}
				}
				if !found {
					t.Fatalf("step %d: no time from %d to %d µs gives, in Go, the decisions %+v of %+v and the states %v",
						step, from, to, got, reqs, synced)
				}
			}
		})
	}
}
