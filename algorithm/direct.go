package algorithm

// Direct is the decision of an algorithm as a direct call, for a store's
// hot path; the algorithms New builds for fixed-window, weighted-window,
// token-bucket, gcra and bounded-log give theirs through a method
//
//	Direct() Direct
//
// which a store finds with a type assertion. Called through the Algorithm
// interface, Decide builds its 64-byte Decision on its own stack and copies
// it out, and every slice and pointer handed to it escapes, so a store must
// keep the state in memory of its own; DecideInto writes the decision
// straight into *d, and a state kept in a local array stays on the
// caller's stack. Its decisions are Decide's.
//
// The zero Direct is not usable.
type Direct struct {
	fixed    *fixedWindow
	weighted *weightedWindow
	bucket   *bucket
	log      *boundedLog
}

// Direct returns the fixed window's Direct form.
func (a *fixedWindow) Direct() Direct { return Direct{fixed: a} }

// Direct returns the weighted window's Direct form.
func (a *weightedWindow) Direct() Direct { return Direct{weighted: a} }

// Direct returns the token bucket's or GCRA's Direct form.
func (a *bucket) Direct() Direct { return Direct{bucket: a} }

// Direct returns bounded-log's Direct form, which decides on the first
// words of a state (see Direct.DecideInto).
func (a *boundedLog) Direct() Direct { return Direct{log: a} }

// Prefix reports whether x decides on the first words of a state, the rest
// being zero (bounded-log), rather than on the whole state.
func (x *Direct) Prefix() bool { return x.log != nil }

// DecideInto is Decide(state, now, cost) writing every field of the
// decision into *d, and reports true.
//
// For bounded-log (Prefix), state is the first words of the key's state,
// every later word being zero, for a store that keeps a light key's first
// words beside its hash: a decision there needs no copy of the state into a
// full-length buffer and back. It reports false, having changed nothing,
// when the decision needs more than those words or more than the common
// case (a late event, entries to drop, a new entry to open): then the
// caller decides with Decide on the whole state.
func (x *Direct) DecideInto(d *Decision, state []int64, now, cost int64) bool {
	switch {
	case x.fixed != nil:
		x.fixed.decideInto(d, state, now, cost)
	case x.bucket != nil:
		x.bucket.decideInto(d, state, now, cost)
	case x.weighted != nil:
		x.weighted.decideInto(d, state, now, cost)
	default:
		return x.log.decideFast(d, state, now, cost)
	}
	return true
}
