package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// delivery is one push of events by one node, at the time it was sent.
type delivery struct {
	at     int64
	events []event
}

// nodePushes spreads the events of a trace over nodes (each event goes to a
// random node) and returns what the nodes push, in the order they push it:
// every node sends the events it took since its last push every interval,
// on its own phase, except during outages, after which each sends its whole
// backlog at once, node after node.
func nodePushes(rng *rand.Rand, ev []event, nodes int, interval int64, outages [][2]int64) []delivery {
	type node struct {
		next    int64
		pending []event
	}
	ns := make([]node, nodes)
	for i := range ns {
		ns[i].next = rng.Int64N(interval) + 1
	}
	down := func(t int64) bool {
		for _, o := range outages {
			if t >= o[0] && t < o[1] {
				return true
			}
		}
		return false
	}
	var out []delivery
	flushUpTo := func(t int64) {
		for {
			// The node whose push is due first.
			best := -1
			for i := range ns {
				if ns[i].next <= t && (best < 0 || ns[i].next < ns[best].next) {
					best = i
				}
			}
			if best < 0 {
				return
			}
			n := &ns[best]
			if !down(n.next) && len(n.pending) > 0 {
				out = append(out, delivery{n.next, n.pending})
				n.pending = nil
			}
			n.next += interval
		}
	}
	for _, e := range ev {
		flushUpTo(e.t)
		i := rng.IntN(nodes)
		ns[i].pending = append(ns[i].pending, e)
	}
	flushUpTo(ev[len(ev)-1].t + 2*interval + outages[len(outages)-1][1])
	return out
}

// TestBoundedLogLateRecord merges traces as delayed nodes would (8 nodes
// pushing every W/300, with outages of W/6 after which every node pushes its
// backlog) and checks after every push that the log undercounts the exact
// units of (t-W, t] by at most m, that no entry holds more than m while the
// window holds fewer than L units, that entries stay in time order without
// overlapping, and that every decision is well formed.
func TestBoundedLogLateRecord(t *testing.T) {
	totalLate, total := 0, 0
	defer func() {
		if totalLate < total/5 {
			t.Errorf("only %d of %d events were late: the test misses Record's late path", totalLate, total)
		}
	}()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 11))
		l := []int64{20, 100, 600, 1000}[seed%4]
		tol := []float64{0.05, 0.1, 0.2}[seed%3]
		w := int64(time.Minute)
		a := mustNew(t, Config{Algorithm: BoundedLog, Limit: l, Window: time.Minute, Tolerance: tol}).(*boundedLog)
		// About the limit's rate, with some bursts, for four windows.
		var ev []event
		for tm := int64(time.Second); tm < 4*w; {
			tm += rng.Int64N(2*w/l) + 1
			if rng.IntN(50) == 0 {
				tm += rng.Int64N(w / 10)
			}
			cost := int64(1)
			if rng.IntN(10) == 0 {
				cost = 1 + rng.Int64N(3)
			}
			ev = append(ev, event{tm, cost})
		}
		outages := [][2]int64{{w + w/3, w + w/2}, {3 * w, 3*w + w/6}}
		pushes := nodePushes(rng, ev, 8, w/300, outages)
		s := make([]int64, a.Words())
		var got []event // every event recorded so far, in time order
		// The checks read the entries in the wide ring form.
		r := make([]int64, a.Words())
		wide := func() []int64 { a.expand(s, r); return r }
		excess := func() (x int64) {
			r := wide()
			for i := range r[0] {
				x += max(0, r[a.ring.at(r, i)+2]-a.m)
			}
			return x
		}
		full, late := 0, 0
		for pi, p := range pushes {
			for _, e := range p.events {
				if r := wide(); r[0] > 0 && e.t < r[a.ring.at(r, r[0]-1)+1] {
					late++
				}
				before := excess()
				a.Record(s, e.t, e.cost)
				i, _ := slices.BinarySearchFunc(got, e, func(x, y event) int { return int(x.t - y.t) })
				got = slices.Insert(got, i, e)
				// Units beyond m only when the ring is full, which takes
				// at least L units in the window.
				if latest, _, _, _ := a.ring.view(wide(), e.t); excess() > before && windowSum(got, latest, w) < l {
					t.Fatalf("seed %d (L %d) push %d: an entry went above m = %d with %d units in the window: %v",
						seed, l, pi, a.m, windowSum(got, latest, w), s)
				}
			}
			now := max(p.at, got[len(got)-1].t)
			latest, drop, _, sum := a.ring.view(wide(), now)
			exact := windowSum(got, latest, w)
			d := a.Peek(s, now, 1)
			checkDecision(t, a, d, 1)
			if excess() > 0 {
				full++ // a full ring made an entry hold more than m
			} else if sum < exact-a.m || d.Remaining > max(0, l-exact+a.m) {
				t.Fatalf("seed %d (L %d, m %d) push %d at %v: counts %d (remaining %d), exact %d: undercount above m",
					seed, l, a.m, pi, time.Duration(latest), sum, d.Remaining, exact)
			}
			if d := a.Peek(s, now, l); !d.Allowed {
				checkDecision(t, a, d, l)
			}
			r := wide()
			n := r[0]
			for i := drop; i < n; i++ { // the entries kept at now
				o := a.ring.at(r, i)
				if r[o] > r[o+1] || r[o+2] < 1 {
					t.Fatalf("seed %d push %d: bad entry %d: %v", seed, pi, i, r[o:o+3])
				}
				if i+1 < n && r[o+1] > r[a.ring.at(r, i+1)] {
					t.Fatalf("seed %d push %d: entries %d and %d overlap: %v %v", seed, pi, i, i+1, r[o:o+3], r[a.ring.at(r, i+1):a.ring.at(r, i+1)+3])
				}
			}
		}
		totalLate, total = totalLate+late, total+len(ev)
		t.Logf("seed %d (L %d, m %d): %d events, %d late, %d of %d pushes with a full ring", seed, l, a.m, len(ev), late, full, len(pushes))
	}
}

// replayPushes merges pushes into a new state in order, checking that no
// Record moves the newest timestamp back, and after each push calls check
// with the view at the push's time and the exact units of that view's
// window.
func replayPushes(t *testing.T, a *boundedLog, pushes []delivery, check func(v logView, exact int64)) {
	t.Helper()
	s := make([]int64, a.Words())
	var got []event // every event recorded so far, in time order
	for _, p := range pushes {
		for _, e := range p.events {
			newest := s[1]
			a.Record(s, e.t, e.cost)
			if s[1] < newest {
				t.Fatalf("Record of a late event at %v moved the newest timestamp back from %v to %v", time.Duration(e.t), time.Duration(newest), time.Duration(s[1]))
			}
			i, _ := slices.BinarySearchFunc(got, e, func(x, y event) int { return int(x.t - y.t) })
			got = slices.Insert(got, i, e)
		}
		var v logView
		a.view(s, p.at, &v)
		check(v, windowSum(got, v.t, int64(a.window)))
	}
}

// TestBoundedLogLateRecordAtTheLimit is the delayed-sync outage of the
// distributed tests at the algorithm level: a client at exactly the limit
// (600 per minute, one request every 100 ms) whose events eight nodes push
// every 200 ms, none of them from 55 to 65 s. After every push the merged
// log must count no more than the exact units of (t-W, t], since any
// overcount rejects this client, and no fewer than that minus m.
func TestBoundedLogLateRecordAtTheLimit(t *testing.T) {
	for seed := range uint64(10) {
		a := mustNew(t, Config{Algorithm: BoundedLog, Limit: 600, Window: time.Minute}).(*boundedLog)
		rng := rand.New(rand.NewPCG(seed, 5))
		var ev []event
		for i := range int64(1200) {
			ev = append(ev, event{i * int64(100*time.Millisecond), 1})
		}
		pushes := nodePushes(rng, ev, 8, int64(200*time.Millisecond), [][2]int64{{55e9, 65e9}})
		replayPushes(t, a, pushes, func(v logView, exact int64) {
			if v.sum > exact || v.sum < exact-a.m {
				t.Fatalf("seed %d at %v: counts %d, exact %d (m %d)", seed, time.Duration(v.t), v.sum, exact, a.m)
			}
		})
	}
}

// lastNonzero returns one past the index of the last nonzero word of s: the
// words a store that trims trailing zeros keeps.
func lastNonzero(s []int64) int {
	n := len(s)
	for n > 0 && s[n-1] == 0 {
		n--
	}
	return n
}

// TestBoundedLogCompactState checks the compact encoding's sizes at L = 600,
// e = 0.05: a key with one request is three nonzero words, a key held at
// its limit never more than 23, and Decide never sets the merged bit.
func TestBoundedLogCompactState(t *testing.T) {
	a := mustNew(t, Config{Algorithm: BoundedLog, Limit: 600, Window: time.Minute}).(*boundedLog)
	s := make([]int64, a.Words())
	a.Decide(s, int64(time.Hour), 1)
	if got := lastNonzero(s); got != 3 {
		t.Fatalf("one request: %d words in use, want 3: %v", got, s[:8])
	}
	// Up to m units, spread over the window, stay in three words.
	for i := int64(1); i < a.m; i++ {
		a.Decide(s, int64(time.Hour)+i*int64(time.Second), 1)
	}
	if got := lastNonzero(s); got != 3 {
		t.Fatalf("m requests: %d words in use, want 3", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	s = make([]int64, a.Words())
	peak := 0
	for tm := int64(0); tm < 5*int64(time.Minute); tm += rng.Int64N(int64(50*time.Millisecond)) + 1 {
		a.Decide(s, tm, 1+rng.Int64N(3))
		if s[0]&blMerged != 0 {
			t.Fatalf("Decide set the merged bit")
		}
		peak = max(peak, lastNonzero(s))
	}
	if peak > 23 {
		t.Fatalf("a key at its limit used %d words, want at most 23", peak)
	}
	t.Logf("key at its limit: at most %d words", peak)
}

// TestBoundedLogSizeExact checks that m is floor(e*L) computed exactly,
// never rounded up past the true product.
func TestBoundedLogSizeExact(t *testing.T) {
	for l := int64(1); l < 5000; l++ {
		for _, e := range []float64{0.01, 0.03, 0.05, 0.07, 0.1, 0.3, 1.0 / 3, 0.7} {
			m, _ := boundedLogSize(l, e)
			if m > 1 && float64(m) > e*float64(l) {
				t.Fatalf("L %d e %v: m %d above e*L", l, e, m)
			}
		}
	}
}

// TestBoundedLogLateRecordHonest merges, as delayed nodes would, traces of
// honest clients (never more than L units in any window) that change pace:
// light phases of one unit every few seconds, which Record folds into one
// long entry, runs at about the limit's rate and bursts at twice it, with
// two outages after which every node pushes its backlog. After every push
// the merged log must count no fewer than the exact units of (t-W, t] less
// m, and its newest timestamp must never have gone back. How far it
// overcounts (events inside full entries counted from later ones) is
// logged, between the outages and in the window after each: up to 136
// units of 600 after the outages (see docs/distributed.md, "Merged counts
// after an outage").
func TestBoundedLogLateRecordHonest(t *testing.T) {
	w := int64(time.Minute)
	checks, over, calm := 0, 0, 0
	worst, worstCalm := int64(0), int64(0)
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 23))
		l := []int64{600, 100, 1000}[seed%3]
		a := mustNew(t, Config{Algorithm: BoundedLog, Limit: l, Window: time.Minute}).(*boundedLog)
		var ev []event
		inWindow := func(tm int64) (sum int64) {
			for i := len(ev) - 1; i >= 0 && ev[i].t > tm-w; i-- {
				sum += ev[i].cost
			}
			return sum
		}
		tm := int64(time.Second)
		for range 8 {
			end := tm + w/2 + rng.Int64N(w)
			// Mean gap between units: light, twice the limit's rate, about
			// it, or a third of it.
			gap := []int64{5 * int64(time.Second), w / l / 2, w / l, w / l * 3}[rng.IntN(4)]
			for tm < end {
				tm += rng.Int64N(2*gap) + 1
				if inWindow(tm) < l {
					ev = append(ev, event{tm, 1})
				}
			}
		}
		outages := [][2]int64{{2 * w, 2*w + w/6}, {5 * w, 5*w + w/4}}
		pushes := nodePushes(rng, ev, 8, int64(200*time.Millisecond), outages)
		replayPushes(t, a, pushes, func(v logView, exact int64) {
			if v.sum < exact-a.m {
				t.Fatalf("seed %d (L %d) at %v: counts %d, exact %d: undercount above m = %d", seed, l, time.Duration(v.t), v.sum, exact, a.m)
			}
			checks++
			if x := v.sum - exact; x > 0 {
				over++
				worst = max(worst, x)
				afterOutage := false
				for _, o := range outages {
					afterOutage = afterOutage || v.t >= o[0] && v.t < o[1]+w
				}
				if !afterOutage {
					calm++
					worstCalm = max(worstCalm, x)
				}
			}
		})
	}
	t.Logf("%d pushes: %d overcounted, by at most %d units; outside the outages and the window after each, %d, by at most %d", checks, over, worst, calm, worstCalm)
}

// TestBoundedLogRecordInOrderLight checks that a light key (at most m units
// in any window) whose events Record takes in time order, as the delayed
// arrangement's store takes a key one node serves, is never merged and
// keeps at most two entries, the forms a store keeps in one integer, and
// counts what Decide counts on the same events.
func TestBoundedLogRecordInOrderLight(t *testing.T) {
	w := int64(time.Minute)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 31))
		l := []int64{600, 100, 20}[seed%3]
		a := mustNew(t, Config{Algorithm: BoundedLog, Limit: l, Window: time.Minute}).(*boundedLog)
		rec, dec := make([]int64, a.Words()), make([]int64, a.Words())
		var ev []event
		tm := int64(time.Hour)
		for range 400 {
			tm += rng.Int64N(int64(20*time.Second)) + 1
			c := 1 + rng.Int64N(min(3, a.m))
			if windowSum(ev, tm, w)+c > a.m {
				continue
			}
			ev = append(ev, event{tm, c})
			a.Record(rec, tm, c)
			if d := a.Decide(dec, tm, c); !d.Allowed {
				t.Fatalf("seed %d: Decide rejected a light key: %+v", seed, d)
			}
			if rec[0]&blMerged != 0 || a.UsedWords(rec) > 4 {
				t.Fatalf("seed %d at %v: Record made %d words in use (merged %v): %v", seed, time.Duration(tm), a.UsedWords(rec), rec[0]&blMerged != 0, rec[:6])
			}
			var vr, vd logView
			a.view(rec, tm, &vr)
			a.view(dec, tm, &vd)
			if x := windowSum(ev, tm, w); vr.sum != vd.sum || vr.sum > x || vr.sum < x-a.m {
				t.Fatalf("seed %d at %v: Record counts %d, Decide %d, exact %d", seed, time.Duration(tm), vr.sum, vd.sum, windowSum(ev, tm, w))
			}
		}
	}
}

// TestBoundedLogRecordInOrderAtTheLimit checks that a key at its limit's
// even rate, recorded in time order, keeps no more entries than Decide
// keeps on the same requests and counts what Decide counts.
func TestBoundedLogRecordInOrderAtTheLimit(t *testing.T) {
	a := mustNew(t, Config{Algorithm: BoundedLog, Limit: 600, Window: time.Minute}).(*boundedLog)
	rec, dec := make([]int64, a.Words()), make([]int64, a.Words())
	step := int64(time.Minute) / 600
	for i := range int64(1500) {
		tm := int64(time.Hour) + i*step
		a.Record(rec, tm, 1)
		a.Decide(dec, tm, 1)
		var vr, vd logView
		a.view(rec, tm, &vr)
		a.view(dec, tm, &vd)
		if vr.n > vd.n || vr.sum != vd.sum {
			t.Fatalf("request %d: Record keeps %d entries counting %d, Decide %d counting %d", i, vr.n, vr.sum, vd.n, vd.sum)
		}
	}
}
