package algorithm

// Direct is the decision of a counting algorithm (fixed-window,
// weighted-window, token-bucket, gcra) as a direct call, for a store's hot
// path. Called through the Algorithm interface, Decide builds its 64-byte
// Decision on its own stack and copies it out, and every slice and pointer
// handed to it escapes, so a store must keep the state in memory of its
// own; DecideInto writes the decision straight into *d, and a state kept
// in a local array stays on the caller's stack. The decisions are Decide's:
// Decide is a DecideInto into its result.
//
// The zero Direct is not usable; get one from DirectOf.
type Direct struct {
	fixed    *fixedWindow
	weighted *weightedWindow
	bucket   *bucket
}

// DirectOf returns the Direct form of a, and false if a has none (an
// algorithm not built by New, or one of the others).
func DirectOf(a Algorithm) (Direct, bool) {
	switch x := a.(type) {
	case *fixedWindow:
		return Direct{fixed: x}, true
	case *weightedWindow:
		return Direct{weighted: x}, true
	case *bucket:
		return Direct{bucket: x}, true
	}
	return Direct{}, false
}

// DecideInto is Decide(state, now, cost) writing every field of the
// decision into *d.
func (x *Direct) DecideInto(d *Decision, state []int64, now, cost int64) {
	switch {
	case x.fixed != nil:
		x.fixed.decideInto(d, state, now, cost)
	case x.bucket != nil:
		x.bucket.decideInto(d, state, now, cost)
	default:
		x.weighted.decideInto(d, state, now, cost)
	}
}
