package algorithm

// Changing a limit without losing its count
//
// A key's state means something only under the parameters that wrote it: a
// bucket's theoretical arrival time is its debt in units times the
// emission interval, a bounded log's closed entries hold m = floor(e·L)
// units each. Identity and Convert let a store keep a key's count across a
// change of such parameters (Limiter.SetLimit, a rule reload, a key that
// moves to another plan): two algorithms with the same Identity count the
// same thing, and Convert re-expresses a state one of them wrote as a state
// of the other.

// Identity returns the parameters of c that name the counter its keys'
// states live in: c itself when c.Counter is empty, so that limits that
// differ in anything count apart; else c with the parameters a state can
// be converted across (ConvertFrom) zeroed, so that limits of one Counter
// that differ only in them share each key's state. c is a checked Config
// (Algorithm.Config). What identifies a counter beyond its Counter:
//
//	fixed-window, weighted-window       the window (or the calendar period)
//	sliding-window                      the window and the slices
//	token-bucket, gcra, leaky-bucket    nothing: all parameters convert
//	bounded-log                         the window
//	sliding-log, concurrency            everything: nothing converts
func (c Config) Identity() Config {
	if c.Counter == "" {
		return c
	}
	switch c.Algorithm {
	case FixedWindow, WeightedWindow, SlidingWindow, BoundedLog:
		c.Limit, c.Tolerance, c.CarryOver = 0, 0, 0
	case TokenBucket, GCRA, LeakyBucket:
		c.Limit, c.Window, c.Capacity, c.Rate, c.Burst, c.MaxDelay = 0, 0, 0, 0, 0, 0
	}
	return c
}

// ConvertFrom is how a store keeps a key's count when the algorithm that
// decides on it changes to another with the same Config.Identity: every
// algorithm New builds has the method
//
//	ConvertFrom(from Algorithm, src []int64, now int64, dst []int64) bool
//
// which a store finds with a type assertion. See convert.

// converter is an algorithm that can read the states of another with the
// same Identity.
type converter interface {
	// convertFrom writes into dst (zeroed, len Words()) the state src of
	// from re-expressed as of now.
	convertFrom(from Algorithm, src, dst []int64, now int64)
}

// convert is ConvertFrom: it writes into dst, which has to.Words() words,
// the state src that from wrote, re-expressed as a state of to at time now
// (Unix nanoseconds), keeping what it counted, and reports whether it
// could: from and to must have the same Identity and be algorithms New
// built. src is not changed.
//
// What is kept, and the promise across the change (docs/rules.md):
//
//   - fixed-window, weighted-window, sliding-window: the counts as they are
//     (a sliding window's are repacked when the limit crosses 2^16, and
//     saturate at their field, which is above any limit that uses it).
//   - token-bucket, gcra, leaky-bucket: the debt (or the queue) in units,
//     rounded up to a whole unit, at the new interval, and at most the debt
//     to's Record keeps (two buckets, or the longest queue), so that a key
//     expires no sooner than its debt is paid.
//   - bounded-log: every entry, with its count (the old entries become the
//     explicit counts of the merged form until they leave the window). When
//     to holds fewer entries than src counts, the oldest are combined, each
//     combination counted from its newest part's first timestamp: an
//     overcount until it leaves the window, never an undercount.
//
// So a raised limit admits at once what it allows beyond what was counted,
// and a lowered one applies at once to the count so far.
func convert(from, to Algorithm, src []int64, now int64, dst []int64) bool {
	if len(src) < from.Words() || len(dst) < to.Words() || from.Config().Identity() != to.Config().Identity() {
		return false
	}
	dst = dst[:to.Words()]
	clear(dst)
	if from.Config() == to.Config() {
		copy(dst, src)
		return true
	}
	c, ok := to.(converter)
	if !ok {
		return false
	}
	if _, ok := from.(converter); !ok {
		return false
	}
	c.convertFrom(from, src[:from.Words()], dst, now)
	return true
}

func (a *fixedWindow) convertFrom(from Algorithm, src, dst []int64, now int64) {
	copy(dst, src)
}

func (a *weightedWindow) convertFrom(from Algorithm, src, dst []int64, now int64) {
	copy(dst, src)
}

func (a *slidingWindow) convertFrom(from Algorithm, src, dst []int64, now int64) {
	f := from.(*slidingWindow)
	if f.bits == a.bits {
		copy(dst, src)
		return
	}
	if src[0] < 0 || src[0] > f.lastSlice {
		return // a state no sliding window wrote: the zero state
	}
	dst[0] = src[0]
	for p := range a.slices {
		a.setAt(dst, p, f.countAt(src, p))
	}
}

func (a *bucket) convertFrom(from Algorithm, src, dst []int64, now int64) {
	f := from.(*bucket)
	convertTAT(src, dst, now, f.interval, a.interval, 2*a.span)
}

func (a *leakyBucket) convertFrom(from Algorithm, src, dst []int64, now int64) {
	f := from.(*leakyBucket)
	convertTAT(src, dst, now, f.interval, a.interval, a.maxDelay+a.limit*a.interval)
}

// convertTAT converts a bucket's state [tat, latest] from emission interval
// fromIv to toIv: the debt tat - t0, t0 the later of now and latest, is
// ceil((tat-t0)/fromIv) units, which to spends toIv each on, at most debt
// past t0.
func convertTAT(src, dst []int64, now, fromIv, toIv, debt int64) {
	s := [2]int64{src[0], src[1]}
	repairTAT(s[:])
	t0 := max(clampTime(now), s[1])
	dst[0], dst[1] = s[0], s[1]
	if s[0] <= t0 {
		return // no debt: the bucket is full under any interval
	}
	units := ceilDiv(s[0]-t0, fromIv)
	if most := debt/toIv + 1; units > most {
		units = most // also keeps the product below 2^63
	}
	dst[0] = t0 + min(units*toIv, debt)
}

func (a *boundedLog) convertFrom(from Algorithm, src, dst []int64, now int64) {
	a.convert(from.(*boundedLog), src, dst, now)
}

// convert is convertFrom; it reports whether the converted state counts
// every unit exactly as src did, false when it counts some longer (a
// split open entry, or combined entries that did not start together).
func (a *boundedLog) convert(f *boundedLog, src, dst []int64, now int64) (exact bool) {
	// The ring form of src under f's entry size: explicit first, last and
	// count per entry, oldest first at index 0.
	wide := make([]int64, f.words)
	f.expand(src, wide)
	n := wide[0]
	if n == 0 {
		return true
	}
	type entry struct{ first, last, count int64 }
	es := make([]entry, n)
	for i := range n {
		o := 2 + 3*i
		es[i] = entry{wide[o], wide[o+1], wide[o+2]}
	}
	cut := max(clampTime(now), es[n-1].last) - a.window
	// Drop what no decision counts any more: entries that ended at or
	// before the cut, and the straddler (an entry that began at or before
	// it is never counted again).
	for len(es) > 0 && es[0].first <= cut {
		es = es[1:]
	}
	if len(es) == 0 {
		return true
	}
	exact = true
	// The open entry takes units until it holds m, and an entry Decide
	// closes counts as m: one holding more (a lowered limit) is split into
	// a closed entry of the surplus and an open one of m at its last
	// timestamp, whose units are then counted a little longer.
	if nw := &es[len(es)-1]; nw.count > a.m {
		open := entry{nw.last, nw.last, a.m}
		nw.count -= a.m
		exact = nw.first == nw.last
		es = append(es, open)
	}
	// Decide needs room for the entries it opens: at most
	// floor((L-1)/m) + 2 of them after the kept ones. Closed entries are
	// combined, the two whose first timestamps are closest first, until
	// that much is left; a combination is counted from its newer part's
	// first timestamp, so its units are counted as long as that part's,
	// never less (exactly as long when both began together).
	keep := a.size - (a.limit-1)/a.m - 2
	for int64(len(es)) > keep {
		best := 0
		for i := 1; i+1 < len(es)-1; i++ {
			if es[i+1].first-es[i].first < es[best+1].first-es[best].first {
				best = i
			}
		}
		if es[best+1].first != es[best].first {
			exact = false
		}
		es[best+1].count = addSat(es[best].count, es[best+1].count)
		es = append(es[:best], es[best+1:]...)
	}
	r := make([]int64, a.words)
	r[0] = int64(len(es))
	for i, e := range es {
		o := 2 + 3*i
		r[o], r[o+1], r[o+2] = e.first, e.last, e.count
	}
	a.pack(r, dst)
	return exact
}

// ConvertFrom writes into dst, which has Words() words, the state src
// that from wrote, re-expressed as a state of this algorithm at now,
// keeping what it counted; it reports false (dst unspecified) when from's
// Identity differs. See convert.
func (b *base) ConvertFrom(from Algorithm, src []int64, now int64, dst []int64) bool {
	return convert(from, b.self, src, now, dst)
}
