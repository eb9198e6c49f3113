package algorithm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lease"
)

// holdSim drives an algorithm with holds on a virtual clock: holders that
// take leases, spend their units at times of their own, top up, give back,
// lose replies and vanish, beside plain requests, with skewed traffic. It
// records when every unit was really spent and when the algorithm recorded
// it, so a test can check the algorithm's bound on the spend times and
// account for every rejection.
type holdSim struct {
	t       *testing.T
	rng     *rand.Rand
	a       Algorithm
	h       *held
	s       []int64
	limit   int64
	window  int64
	ttl     int64
	now     int64
	holders []*simHolder
	spends  []event  // every accepted unit at the time it was spent
	records []record // every unit the algorithm recorded, with its spend time
	rejects int      // requests rejected
	falses  int      // of which the key's true count had room for
}

// record is units the algorithm recorded at rec, spent at spend (conv:
// never spent, recorded in full when their hold expired).
type record struct {
	rec, spend, units int64
	conv              bool
}

type simHolder struct {
	id      lease.ID
	seq     int64
	avail   int64   // held units not spent
	unrep   []event // spent units not yet reported
	expires int64   // 0: no lease
	target  int64
	weight  int // how often it acts
	gone    bool
}

func newHoldSim(t *testing.T, seed uint64, c Config) *holdSim {
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	sim := &holdSim{t: t, rng: rand.New(rand.NewPCG(seed, 7)), a: a, h: a.(*held), s: make([]int64, a.Words()),
		limit: c.Limit, window: int64(c.Window), ttl: int64(a.Config().HoldTTL)}
	for i := range 5 {
		target := 1 + sim.rng.Int64N(c.Limit/8+1)
		if sim.rng.IntN(3) == 0 {
			target = c.Limit/2 + sim.rng.Int64N(c.Limit/2+1)
		}
		sim.holders = append(sim.holders, &simHolder{target: target, weight: 1 << (4 - i)}) // skewed: 16, 8, 4, 2, 1
	}
	return sim
}

// convert mirrors the algorithm's conversion of expired holds by an
// operation at now that changes the state (any but a rejected Decide): their unreported spends and unspent units are
// recorded now.
func (sim *holdSim) convert() {
	for _, h := range sim.holders {
		if h.expires != 0 && h.expires <= sim.now {
			for _, e := range h.unrep {
				sim.records = append(sim.records, record{rec: sim.now, spend: e.t, units: e.cost})
			}
			if h.avail > 0 {
				sim.records = append(sim.records, record{rec: sim.now, units: h.avail, conv: true})
			}
			h.unrep, h.avail, h.expires = nil, 0, 0
		}
	}
}

// accepted notes cost units spent now and recorded now.
func (sim *holdSim) accepted(cost int64) {
	sim.spends = append(sim.spends, event{sim.now, cost})
	sim.records = append(sim.records, record{rec: sim.now, spend: sim.now, units: cost})
}

// rejected accounts for a rejection of cost at now: unless the units spent
// in (now-W, now] leave no room for it, the excess that made the key full
// must be units that were never spent (held, or recorded in full at an
// expiry) or spent before now-W and counted since (reported late).
func (sim *holdSim) rejected(cost int64, d Decision) {
	sim.rejects++
	if d.Reason != ReasonOverLimit {
		sim.t.Fatalf("t=%d: rejected cost %d with reason %q", sim.now, cost, d.Reason)
	}
	cut := sim.now - sim.window
	spent := int64(0)
	for i := len(sim.spends) - 1; i >= 0 && sim.spends[i].t > cut; i-- {
		spent += sim.spends[i].cost
	}
	if spent+cost > sim.limit {
		return
	}
	sim.falses++
	if sim.a.Name() == FixedWindow {
		return // counts by calendar window, not by the last W
	}
	excess := int64(0)
	for _, r := range sim.records {
		if r.rec > cut && (r.conv || r.spend <= cut) {
			excess += r.units
		}
	}
	for _, h := range sim.holders {
		excess += h.avail
		for _, e := range h.unrep {
			if e.t <= cut {
				excess += e.cost
			}
		}
	}
	if sim.limit-spent-cost >= excess {
		hh := sim.a.(*held)
		units, _, _ := hh.sums(sim.s, -1)
		in := hh.in.Peek(sim.s[:hh.iw], sim.now, 1)
		recIn := int64(0)
		for _, r := range sim.records {
			if r.rec > cut {
				recIn += r.units
			}
		}
		held := int64(0)
		for _, h := range sim.holders {
			held += h.avail
			for _, e := range h.unrep {
				held += e.cost
			}
		}
		sim.t.Logf("algorithm: inner remaining %d (peek 1 %v), held %d; sim: recorded in window %d, holders hold %d; decision %+v", in.Remaining, in.Allowed, units, recIn, held, d)
		sim.t.Fatalf("t=%d: cost %d rejected with %d units spent in the window of %d and only %d units held unspent or counted late: a false reject no hold explains",
			sim.now, cost, spent, sim.limit, excess)
	}
}

// hold sends op with cost for h and applies the result; lost makes the
// reply go missing, so h sends the same op again.
func (sim *holdSim) hold(h *simHolder, cost, target int64, lost bool) (Decision, lease.Held) {
	sim.convert() // an expired lease is over: the algorithm records it in full
	if h.expires == 0 {
		h.id, h.seq, h.unrep, h.avail = lease.New(), 0, nil, 0
	}
	h.seq++
	spent := int64(0)
	for _, e := range h.unrep {
		spent += e.cost
	}
	op := lease.Op{ID: h.id, Seq: h.seq, Spent: spent, Target: target}
	d, res := sim.h.Hold(sim.s, sim.now, cost, op)
	if lost {
		d2, again := sim.h.Hold(sim.s, sim.now, cost, op)
		if h.expires != 0 || res.Units > 0 {
			if !again.Repeat || again.Units != res.Units || again.TTL != res.TTL || d2.Allowed != d.Allowed {
				sim.t.Fatalf("t=%d: op %+v sent again: %+v %+v, first %+v %+v", sim.now, op, d2, again, d, res)
			}
		} else {
			// A new lease that got nothing holds no record of the op: the
			// cost is decided again, and if both were allowed it is counted
			// twice for one request (never the other way).
			if d.Allowed && d2.Allowed && cost > 0 {
				sim.records = append(sim.records, record{rec: sim.now, units: cost, conv: true})
			}
			if again.Units > 0 || !d.Allowed {
				d, res = d2, again
			}
		}
	}
	if h.expires != 0 { // the lease was found: its spends are recorded now
		for _, e := range h.unrep {
			sim.records = append(sim.records, record{rec: sim.now, spend: e.t, units: e.cost})
		}
		h.unrep = nil
	}
	if cost > 0 {
		if d.Allowed {
			sim.accepted(cost)
		} else {
			sim.rejected(cost, d)
		}
	}
	if target == 0 {
		h.avail, h.expires = 0, 0
		return d, res
	}
	if res.Granted > 0 && 2*res.Granted > d.Remaining+res.Granted+1 {
		sim.t.Fatalf("t=%d: granted %d of %d free: more than half", sim.now, res.Granted, d.Remaining+res.Granted)
	}
	if res.Granted > 0 && res.Units > min(target, sim.limit) {
		sim.t.Fatalf("t=%d: holds %d after a grant, above its target %d", sim.now, res.Units, target)
	}
	h.avail += res.Granted
	if res.Units != h.avail {
		sim.t.Fatalf("t=%d: the algorithm holds %d for the lease, its holder %d", sim.now, res.Units, h.avail)
	}
	h.expires = 0
	if res.TTL > 0 {
		h.expires = sim.now + int64(res.TTL)
	}
	if res.Units == 0 && h.expires == 0 {
		h.avail = 0
	}
	return d, res
}

// step advances the clock by a skewed gap and makes one actor act.
func (sim *holdSim) step() {
	switch r := sim.rng.IntN(100); {
	case r < 70:
		sim.now += sim.rng.Int64N(sim.window/500 + 1)
	case r < 95:
		sim.now += sim.rng.Int64N(sim.window / 20)
	default:
		sim.now += sim.rng.Int64N(sim.window + sim.ttl)
	}
	cost := int64(1)
	if sim.rng.IntN(4) == 0 {
		cost = 1 + sim.rng.Int64N(3)
	}
	total := 4 // plain requests
	for _, h := range sim.holders {
		if !h.gone {
			total += h.weight
		}
	}
	pick := sim.rng.IntN(total)
	if pick < 4 {
		d := sim.a.Decide(sim.s, sim.now, cost)
		if d.Allowed {
			sim.convert() // a rejected decision records nothing, expired holds neither
			sim.accepted(cost)
		} else {
			sim.rejected(cost, d)
		}
		return
	}
	pick -= 4
	var h *simHolder
	for _, x := range sim.holders {
		if x.gone {
			continue
		}
		if pick < x.weight {
			h = x
			break
		}
		pick -= x.weight
	}
	live := h.expires > sim.now
	switch r := sim.rng.IntN(1000); {
	case r < 2 && len(sim.holders) > 1:
		h.gone = true // vanishes with what it holds and what it spent
	case r < 12 && live:
		sim.hold(h, 0, 0, false) // goes quiet: gives back the rest
	case live && (h.expires-sim.now < sim.ttl/4 || 2*h.avail < h.target) && r < 500:
		sim.hold(h, 0, h.target, r%5 == 0) // tops up before it runs out, sometimes losing the reply
	case live && h.avail >= cost:
		h.avail -= cost
		h.unrep = append(h.unrep, event{sim.now, cost})
		sim.spends = append(sim.spends, event{sim.now, cost})
	default:
		sim.hold(h, cost, h.target, r%7 == 0) // empty: this request is decided by the call
	}
}

// TestHoldPromise runs many seeds of holders and plain requests on the
// window algorithms and checks the algorithm's own bound on the times units
// were really spent, every rejection against what held units and late
// reports explain, and that grants leave half of the free allowance free.
func TestHoldPromise(t *testing.T) {
	for _, c := range []Config{
		{Algorithm: BoundedLog, Limit: 120, Window: 10 * time.Second, Tolerance: 0.05, Holds: 8, HoldTTL: 2 * time.Second},
		{Algorithm: BoundedLog, Limit: 40, Window: 10 * time.Second, Tolerance: 0.1, Holds: 3, HoldTTL: 25 * time.Second},
		{Algorithm: SlidingLog, Limit: 60, Window: 5 * time.Second, Holds: 8, HoldTTL: time.Second},
		{Algorithm: FixedWindow, Limit: 50, Window: 5 * time.Second, Holds: 8, HoldTTL: 3 * time.Second},
	} {
		t.Run(fmt.Sprintf("%s-%d-ttl%v", c.Algorithm, c.Limit, c.HoldTTL), func(t *testing.T) {
			rejects, falses := 0, 0
			for seed := range uint64(propertySeeds) {
				sim := newHoldSim(t, seed, c)
				for range 3000 {
					sim.step()
				}
				checkHeldBound(t, sim, c)
				rejects += sim.rejects
				falses += sim.falses
			}
			t.Logf("%d rejections, %d with room in the true count (each explained by held or late units)", rejects, falses)
			if rejects == 0 {
				t.Fatal("no request was rejected: the traffic never reached the limit")
			}
		})
	}
}

// checkHeldBound checks c's bound on the spend times of sim.
func checkHeldBound(t *testing.T, sim *holdSim, c Config) {
	t.Helper()
	switch c.Algorithm {
	case FixedWindow:
		per := map[int64]int64{}
		for _, e := range sim.spends {
			k := e.t / int64(c.Window)
			if per[k] += e.cost; per[k] > c.Limit {
				t.Fatalf("window %d: %d units spent, limit %d", k, per[k], c.Limit)
			}
		}
	default:
		bound := c.Limit
		if c.Algorithm == BoundedLog {
			m, _ := boundedLogSize(c.Limit, c.Tolerance)
			bound += m
		}
		if got := busiestUnits(sim.spends, int64(c.Window)); got > bound {
			t.Fatalf("busiest window of spend times holds %d units, bound %d", got, bound)
		}
	}
}

// TestHoldSizing: far from the limit a holder gets its whole target, near
// it grants shrink, and at the limit they are 0 while the cost of the
// call is still decided.
func TestHoldSizing(t *testing.T) {
	a, err := New(Config{Limit: 1000, Window: time.Minute, Holds: 4})
	if err != nil {
		t.Fatal(err)
	}
	h := a.(*held)
	s := make([]int64, a.Words())
	id := lease.New()
	d, res := h.Hold(s, 1, 1, lease.Op{ID: id, Seq: 1, Target: 100})
	if !d.Allowed || res.Granted != 100 || res.Units != 100 || d.Remaining != 899 {
		t.Fatalf("far from the limit: %+v %+v", d, res)
	}
	// A plain request sees the held units as taken.
	if d := a.Decide(s, 2, 900); d.Allowed {
		t.Fatalf("900 more allowed beside 1 counted and 100 held: %+v", d)
	}
	if d := a.Decide(s, 2, 800); !d.Allowed || d.Remaining != 99 {
		t.Fatalf("800 beside 101: %+v", d)
	}
	// 99 free: a second holder gets at most half, weighted by targets.
	if _, res2 := h.Hold(s, 3, 0, lease.Op{ID: lease.New(), Seq: 1, Target: 100}); res2.Granted != 24 { // floor(99 * 100 / (2 * 200))
		t.Fatalf("second holder near the limit: %+v", res2)
	}
	// The first reports 100 spent and asks again: its spends are counted
	// (75 free: 1000 - 901 counted - 24 held).
	d, res = h.Hold(s, 4, 0, lease.Op{ID: id, Seq: 2, Spent: 100, Target: 100})
	if res.Units != res.Granted || d.Remaining+res.Granted != 75 {
		t.Fatalf("settle and top up: %+v %+v", d, res)
	}
	// Given back, its units are free at once.
	d, res = h.Hold(s, 5, 0, lease.Op{ID: id, Seq: 3, Target: 0})
	if res.Units != 0 || d.Remaining != 75 {
		t.Fatalf("release: %+v %+v", d, res)
	}
	// A repeat of an op already applied changes nothing.
	if d2, again := h.Hold(s, 6, 0, lease.Op{ID: id, Seq: 3, Target: 0}); again.Units != 0 || d2.Remaining != d.Remaining {
		t.Fatalf("repeat of a release: %+v %+v", d2, again)
	}
}

// TestHoldConvert: a limit of one Counter changed (a rule reload) keeps
// what a key counted and what its leases hold.
func TestHoldConvert(t *testing.T) {
	from, _ := New(Config{Limit: 100, Window: time.Minute, Holds: 4, Counter: "r"})
	to, _ := New(Config{Limit: 200, Window: time.Minute, Holds: 4, Counter: "r"})
	s := make([]int64, from.Words())
	from.Decide(s, 1, 30)
	id := lease.New()
	if _, held := from.(*held).Hold(s, 2, 0, lease.Op{ID: id, Seq: 1, Target: 20}); held.Units != 20 {
		t.Fatalf("hold: %+v", held)
	}
	dst := make([]int64, to.Words())
	cv := to.(interface {
		ConvertFrom(Algorithm, []int64, int64, []int64) bool
	})
	if !cv.ConvertFrom(from, s, 3, dst) {
		t.Fatal("not converted")
	}
	if d := to.Peek(dst, 3, 1); !d.Allowed || d.Remaining != 149 {
		t.Fatalf("after the change: %+v, want 30 counted and 20 held of 200", d)
	}
	if _, held := to.(*held).Hold(dst, 4, 0, lease.Op{ID: id, Seq: 2, Spent: 20}); held.Units != 0 {
		t.Fatalf("the lease did not survive the change: %+v", held)
	}
	if d := to.Peek(dst, 4, 1); d.Remaining != 149 {
		t.Fatalf("the lease's 20 spent units: %+v", d)
	}
}

// TestHoldRejectedChangesNothing: a rejected decision leaves the state as
// it was, expired holds included (a store that writes back only what it
// allowed keeps the same state); the next allowed one records them.
func TestHoldRejectedChangesNothing(t *testing.T) {
	a, err := New(Config{Algorithm: SlidingLog, Limit: 10, Window: 10 * time.Second, Holds: 2, HoldTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := a.(*held)
	s := make([]int64, a.Words())
	if _, res := h.Hold(s, 0, 0, lease.Op{ID: lease.New(), Seq: 1, Target: 8}); res.Units != 5 {
		t.Fatalf("granted %d, want 5 (half of what is free)", res.Units)
	}
	for i := range 5 {
		if d := a.Decide(s, int64(i)*int64(time.Millisecond), 1); !d.Allowed {
			t.Fatalf("request %d rejected beside a hold of 5 of 10: %+v", i, d)
		}
	}
	before := append([]int64(nil), s...)
	now := int64(2 * time.Second) // the hold has expired: its 5 units count in full
	if d := a.Decide(s, now, 1); d.Allowed {
		t.Fatalf("allowed with 5 recorded and 5 expired-held of 10: %+v", d)
	}
	if fmt.Sprint(s) != fmt.Sprint(before) {
		t.Fatalf("a rejected decision changed the state:\nbefore %v\nafter  %v", before, s)
	}
	// A flood of rejected requests on such a key decides on a reused copy
	// (under the race detector sync.Pool drops some of what it is given).
	if allocs := testing.AllocsPerRun(1000, func() { a.Decide(s, now, 1) }); allocs >= 0.5 {
		t.Errorf("%v allocations per rejected decision with an expired hold", allocs)
	}
	// Once the five requests have left the window, the expired hold's
	// units, recorded by this decision at its own time, leave room for 4.
	now = int64(10*time.Second + 5*time.Millisecond)
	if d := a.Decide(s, now, 1); !d.Allowed || d.Remaining != 4 {
		t.Fatalf("after the window: %+v, want allowed with 4 left", d)
	}
	if h.n(s) != 0 {
		t.Fatalf("%d holds left; the expired one should be recorded and dropped", h.n(s))
	}
}
