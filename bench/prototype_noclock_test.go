package bench

// Diagnostics, NOT valid limiters: two experiments with the clock read
// taken out. Each decides every request at the time it was made, so its
// windows never end; it exists only so that the difference between it and
// the same experiment with its clock, in the same run, shows what the
// clock read costs a decision.

import "context"

type oneSlotNoClock struct {
	*prototype
	now int64
}

func newOneSlotNoClock() limiter {
	p := newPrototype().(*prototype)
	return oneSlotNoClock{p, p.start.UnixNano()}
}

func (p oneSlotNoClock) allow(_ context.Context, key string) bool { return p.allowAt(p.now, key) }

type bucketCASNoClock struct {
	*bucketCASProto
	now int64
}

func newBucketCASNoClock() limiter {
	p := newBucketCASWith(heapBuckets)
	return bucketCASNoClock{p, p.start.UnixNano()}
}

func (p bucketCASNoClock) allow(_ context.Context, key string) bool { return p.allowAt(p.now, key) }
