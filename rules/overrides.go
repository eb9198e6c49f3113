package rules

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
)

// maxOverrides is the most distinct Overrides (limit and window pairs) a
// rule set keeps built at once, and maxOverrideBytes the most memory they
// may take. A request with an Override the table does not hold evicts the
// least recently used one when either bound is reached; no request is
// refused for it.
//
// Evicting an override loses no count: an override's counters live in the
// store under its limit (algorithm, limit and window) and its key, and an
// evicted override built again has the same limit, so it finds the same
// counters (see docs/security.md).
const (
	maxOverrides     = 256
	maxOverrideBytes = 256 << 10
)

// overrideEntryBytes is what one built override holds: its table entry, its
// rule and the bounded-log algorithm deciding it. TestOverrideEntryBytes
// checks it against what building one allocates.
const overrideEntryBytes = int64(unsafe.Sizeof(overrideEntry{})+unsafe.Sizeof(rule{})) + 640

// overrideTable maps request Overrides to the rules that enforce them,
// within maxOverrides entries and maxOverrideBytes bytes, least recently
// used first out. The zero value is empty and ready.
type overrideTable struct {
	mu      sync.Mutex
	m       map[Override]*overrideEntry
	head    *overrideEntry // most recently used; head.prev is the least
	bytes   int64
	evicted int64
	// maxEntries and maxBytes are maxOverrides and maxOverrideBytes unless
	// a test sets them.
	maxEntries int
	maxBytes   int64
}

// overrideEntry is one built override in the table's ring of entries, in
// order of use.
type overrideEntry struct {
	o          Override
	r          *rule
	prev, next *overrideEntry
}

// rule returns the rule that enforces o, building it if the table does not
// hold it, and marks it the most recently used.
func (t *overrideTable) rule(o Override) (*rule, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[o]; ok {
		t.toFront(e)
		return e.r, nil
	}
	// Every override of one window counts in one counter, as
	// envoyproxy/ratelimit's cache keys leave the limit out: a descriptor
	// whose override changes keeps its count.
	lim, err := newLimit(algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: o.Limit, Window: o.Window, Counter: "=override"})
	if err != nil {
		return nil, fmt.Errorf("%w: limit override %d per %s: %v", ErrInvalidRequest, o.Limit, window.Format(o.Window), err)
	}
	maxEntries, maxBytes := t.maxEntries, t.maxBytes
	if maxEntries == 0 {
		maxEntries, maxBytes = maxOverrides, maxOverrideBytes
	}
	for t.head != nil && (len(t.m) >= maxEntries || t.bytes+overrideEntryBytes > maxBytes) {
		t.remove(t.head.prev)
		t.evicted++
	}
	// No rule file yields an id that starts with '=': rule names cannot
	// hold one, and envoyproxy/ratelimit ids escape it.
	e := &overrideEntry{o: o, r: &rule{index: math.MaxInt, id: "=override", name: overrideRule, countAll: true, base: lim}}
	if t.m == nil {
		t.m = make(map[Override]*overrideEntry)
	}
	t.m[o] = e
	t.bytes += overrideEntryBytes
	t.toFront(e)
	return e.r, nil
}

// toFront makes e, in the ring or not yet, the most recently used entry.
func (t *overrideTable) toFront(e *overrideEntry) {
	if t.head == e {
		return
	}
	if e.next != nil {
		e.prev.next, e.next.prev = e.next, e.prev
	}
	if t.head == nil {
		e.prev, e.next = e, e
	} else {
		e.prev, e.next = t.head.prev, t.head
		t.head.prev.next, t.head.prev = e, e
	}
	t.head = e
}

// remove takes e out of the table.
func (t *overrideTable) remove(e *overrideEntry) {
	delete(t.m, e.o)
	t.bytes -= overrideEntryBytes
	if e.next == e {
		t.head = nil
	} else {
		e.prev.next, e.next.prev = e.next, e.prev
		if t.head == e {
			t.head = e.next
		}
	}
	e.prev, e.next = nil, nil
}

// overrideStats is the state of a rule set's table of request overrides.
type overrideStats struct {
	// Entries and Bytes are the overrides built now and the memory they
	// are accounted (at most maxOverrides and maxOverrideBytes).
	Entries int
	Bytes   int64
	// Evicted counts overrides dropped to make room; each is built again
	// (with the same counters) when a request carries it again.
	Evicted int64
}

// overrideStats reports the table of request overrides of the set (for a
// directory, summed over its domains).
func (s *Set) overrideStats() overrideStats {
	var st overrideStats
	for _, m := range s.all() {
		t := &m.overrides
		t.mu.Lock()
		st.Entries += len(t.m)
		st.Bytes += t.bytes
		st.Evicted += t.evicted
		t.mu.Unlock()
	}
	return st
}

// OverridePolicy is what a front end does with the limit overrides
// requests carry (Request.Overrides). An override replaces the rules for
// its descriptor, so whoever may send one chooses their own limit: allow
// them only from callers trusted to set limits, such as Envoy, whose
// overrides come from its route configuration.
type OverridePolicy uint8

// Override policies. The zero value is OverridesAllow.
const (
	// OverridesAllow applies them.
	OverridesAllow OverridePolicy = iota
	// OverridesIgnore decides every descriptor by the rules, as if the
	// request carried no override.
	OverridesIgnore
	// OverridesReject answers a request that carries one as invalid (an
	// error wrapping ErrInvalidRequest).
	OverridesReject
)

// errOverrideRefused is returned by OverridePolicy.Apply for a request
// with an override under OverridesReject.
var errOverrideRefused = fmt.Errorf("%w: limit overrides are refused here", ErrInvalidRequest)

// UnmarshalText reads a policy as configuration files write it: allow,
// ignore or reject.
func (p *OverridePolicy) UnmarshalText(text []byte) error {
	for q := OverridesAllow; q <= OverridesReject; q++ {
		if q.String() == string(text) {
			*p = q
			return nil
		}
	}
	return fmt.Errorf("limit overrides %q: write allow, ignore or reject", text)
}

// String returns the policy's name: allow, ignore or reject.
func (p OverridePolicy) String() string {
	switch p {
	case OverridesIgnore:
		return "ignore"
	case OverridesReject:
		return "reject"
	default:
		return "allow"
	}
}

// Apply applies the policy to req: it leaves it alone (allow), drops its
// overrides (ignore), or returns an error wrapping ErrInvalidRequest if
// it carries one (reject).
func (p OverridePolicy) Apply(req *Request) error {
	if p == OverridesAllow || len(req.Overrides) == 0 {
		return nil
	}
	if p == OverridesIgnore {
		req.Overrides = nil
		return nil
	}
	for i, o := range req.Overrides {
		if o != (Override{}) {
			return fmt.Errorf("%w: descriptor %d sets its own limit (%d per %s); leave the limit out: the server's rules decide requests from here",
				errOverrideRefused, i, o.Limit, window.Format(o.Window))
		}
	}
	return nil
}
