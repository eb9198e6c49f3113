package algorithm

// LogPrefix decides bounded-log's common cases on the first words of a
// state, for a store that keeps a light key's first words beside its hash
// (the rest of its Words() being zero): a decision there needs no copy of
// the state into a full-length buffer and back. Its decisions and writes
// are Decide's; a case it does not decide it leaves to Decide on the whole
// state. It is a concrete type, so that a decision and a state handed to it
// stay on the caller's stack.
//
// The zero LogPrefix is not usable; get one from LogPrefixOf.
type LogPrefix struct{ a *boundedLog }

// LogPrefixOf returns the LogPrefix form of a, and false if a is not a
// bounded-log built by New.
func LogPrefixOf(a Algorithm) (LogPrefix, bool) {
	if x, ok := a.(*boundedLog); ok {
		return LogPrefix{x}, true
	}
	return LogPrefix{}, false
}

// DecideInto decides a request of cost at now on the state whose first
// words are prefix (every later word zero), as Decide on the whole state
// would, writing every field of the decision into *d and the state's
// changes into prefix. It reports false, having changed nothing, when the
// decision needs more than prefix or than the common case (a late event,
// entries to drop, a new entry to open): then the caller decides with
// Decide on the whole state.
func (x LogPrefix) DecideInto(d *Decision, prefix []int64, now, cost int64) bool {
	return x.a.decideFast(d, prefix, now, cost)
}
