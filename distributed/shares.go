package distributed

import (
	"fmt"
	"hash/maphash"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// A split node that counts the live nodes (Options.Membership) enforces a
// share of each limit that follows the count: when it sees the count change
// to n', its share moves in a straight line from where it is to L/n' over
// the rule's window (falling shares are rounded down, rising ones up to the
// whole unit not yet reached), and a node starts from nothing (the first of
// a fleet too: it cannot tell what nodes before it used within the window).
// So the nodes' shares add up to the limit at every moment, but for the up
// to one heartbeat period it takes the others to see a newcomer and one unit
// each of the newcomers (a share is at least 1), and a steady client finds
// on every node a count that follows the node's share.
//
// A key's count is kept across the changes. Its state lives in the
// algorithm of the ramp's larger end (the share it comes from when it
// falls, the share it goes to when it rises), converted to it at most
// once per change (algorithm ConvertFrom: the count kept; where a state
// cannot convert, as a sliding log's, what it used is recorded at the
// time of the change, which counts it no less, for one window), and each
// decision counts the difference between that end and the share now as a
// charge, as the eviction summary's charge is counted: a lower share
// applies at once to the count so far, a raised one admits what it allows
// beyond it.

// countChange is a count the node saw, and when (its clock, Unix ns).
type countChange struct {
	at    int64
	nodes int
}

// maxCountChanges bounds the counts a node remembers; a rule whose share
// has not been computed for that many changes starts again from the
// oldest remembered.
const maxCountChanges = 256

// seen records a count change at now. The caller holds m.mu.
func (m *membership) seen(now int64, nodes int) {
	if len(m.changes) == maxCountChanges {
		m.changes = append(m.changes[:0], m.changes[1:]...)
		m.dropped++
	}
	m.changes = append(m.changes, countChange{at: now, nodes: nodes})
	m.changeSeq.Add(1)
}

// shareAlg is a split share of a rule as a decision sees it: the
// algorithm of the ramp's larger end (share), the rule it is a share of,
// which names the node's entries (see shard.get), so a key keeps one entry
// across share changes, and the units of share the node does not hold now
// (charge).
type shareAlg struct {
	algorithm.Algorithm
	rule   algorithm.Config
	share  int64
	charge int64
}

// ramp is one rule's share on a live split node.
type ramp struct {
	mu        sync.Mutex
	rule      algorithm.Algorithm
	span      int64     // the time a share takes to move: the rule's window
	applied   uint64    // the changes taken into from, to and start (changeSeq)
	from, to  int64     // the share moves from from to to ...
	start     int64     // ... in span from start
	base      *shareAlg // the algorithm of the ramp's larger end
	cur       *shareAlg // base with the charge of the last decision
	counterID string
}

// liveShare returns the share of rule's limit the node enforces at now.
func (n *Node) liveShare(rule algorithm.Algorithm, now int64) (*shareAlg, error) {
	cfg := rule.Config()
	v, ok := n.ramps.Load(cfg)
	if !ok {
		r := &ramp{rule: rule, span: max(int64(rampSpan(rule)), 1), counterID: counterName(n.rampSeed, cfg)}
		v, _ = n.ramps.LoadOrStore(cfg, r)
	}
	r := v.(*ramp)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n.mem.changeSeq.Load() != r.applied {
		n.follow(r)
	}
	base, share := r.at(now)
	if r.base == nil || r.base.share != base {
		a, err := algorithm.New(shareConfig(cfg, base, r.counterID))
		if err != nil {
			return nil, fmt.Errorf("distributed: a share of %d of %s: %w", base, cfg.Algorithm, err)
		}
		r.base = &shareAlg{Algorithm: a, rule: cfg, share: base}
		r.cur = nil
	}
	if r.cur == nil || r.cur.charge != base-share {
		c := *r.base
		c.charge = base - share
		r.cur = &c
	}
	return r.cur, nil
}

// follow takes the count changes after r.applied into r. The caller holds
// r.mu.
func (n *Node) follow(r *ramp) {
	m := n.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	seq := m.changeSeq.Load()
	// The changes r has not taken are the last seq - r.applied; if some
	// were forgotten, start from the oldest kept.
	first := len(m.changes) - int(seq-r.applied)
	if r.applied == 0 || first < 0 {
		c := m.changes[0]
		r.to = target(r.rule.Config().Limit, c.nodes*n.regions)
		r.from, r.start = r.to, c.at
		if r.applied == 0 && m.dropped == 0 {
			// The node's first count: whoever ran before it may have
			// used the limit within the window, so its share starts from
			// nothing.
			r.from = 1
		}
		first = 1
	}
	for _, c := range m.changes[first:] {
		_, cur := r.at(c.at)
		r.from, r.to, r.start = cur, target(r.rule.Config().Limit, c.nodes*n.regions), c.at
	}
	r.applied = seq
}

// target is a node's share of limit among nodes: the nth part, rounded
// down, at least 1.
func target(limit int64, nodes int) int64 { return max(1, limit/int64(max(nodes, 1))) }

// at returns the share at now, and the larger end of the ramp it is on
// while it moves (the share itself once it has arrived).
func (r *ramp) at(now int64) (base, share int64) {
	d := now - r.start
	switch {
	case d >= r.span || r.from == r.to:
		return r.to, r.to
	case d <= 0:
		share = r.from
	case r.to < r.from:
		// Falling: every unit it owes is given up at the start of its
		// stretch of time.
		share = r.from - ceilMulDiv(r.from-r.to, d, r.span)
	default:
		// Rising: a unit is taken at the end of its stretch.
		share = r.from + mulDiv(r.to-r.from, d, r.span)
	}
	return max(r.from, r.to), share
}

// mulDiv returns floor(a*b/c) for 0 <= a, 0 <= b <= c, 0 < c, without
// overflow.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// ceilMulDiv returns ceil(a*b/c) under mulDiv's conditions.
func ceilMulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	return int64(q)
}

// shareConfig returns c with its allowance scaled to share of c.Limit:
// Limit becomes share, Capacity and Burst (above 1) their part in the same
// proportion rounded down (at least 1), Rate its part; Counter names the
// rule, so that every share of it has one Identity and a key's state
// converts from one share to the next.
func shareConfig(c algorithm.Config, share int64, counter string) algorithm.Config {
	whole := c.Limit
	part := func(v int64) int64 {
		if v <= 0 || whole <= 0 {
			return v
		}
		return max(1, mulDiv(v, min(share, whole), whole))
	}
	c.Capacity = part(c.Capacity)
	if c.Burst > 1 {
		c.Burst = part(c.Burst)
	}
	if c.Rate > 0 && whole > 0 {
		c.Rate = c.Rate * float64(share) / float64(whole)
	}
	c.Limit = share
	c.Counter = counter
	return c
}

// counterName names the counter of a rule's shares: the rule's own
// counter, if it has one, and a hash of the rest of its configuration.
func counterName(seed maphash.Seed, c algorithm.Config) string {
	return "split:" + c.Counter + ":" + strconv.FormatUint(maphash.Comparable(seed, c), 36)
}

// rampSpan is the time a live split node's share of a limit takes to follow
// a count change: the limit's window (or, for a limit without one, the time
// its state takes to go idle).
func rampSpan(a algorithm.Algorithm) time.Duration {
	if w := a.Config().Window; w > 0 {
		return w
	}
	return a.IdleAfter()
}
