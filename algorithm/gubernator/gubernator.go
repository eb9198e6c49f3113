// Package gubernator is gubernator's token and leaky buckets as one
// algorithm.Algorithm whose parameters come with each request (New), the
// decision behind the gubernator API of `floodgate serve`. Its arithmetic
// mirrors gubernator's algorithms.go and interval.go, quirks included, as
// released in v2.21.0 (V221, the default) or v2.13.0 (V213); the
// interop/gubernator module holds it equal to gubernator itself.
package gubernator

import (
	"math"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Name names the algorithm of gubernator's API (New). It is not one of
// algorithm.Names: rule files cannot name it, since its parameters come with
// each request.
const Name algorithm.Name = "gubernator"

// ReasonBadPeriod is the Reason of a request that asks for
// DURATION_IS_GREGORIAN with a duration that names no calendar period
// gubernator supports.
const ReasonBadPeriod algorithm.Reason = "bad_period"

// Reasons of V221's answers to a request with MaxWait: ReasonScheduled is
// gubernator's SCHEDULED (hits booked ahead: the decision's RetryAfter is
// when to act), ReasonNeverFits its NEVER_FITS (more hits than the burst:
// nothing charged). A refused MaxWait request is ReasonOverLimit with the
// wait it would have needed as RetryAfter.
const (
	ReasonScheduled algorithm.Reason = "scheduled"
	ReasonNeverFits algorithm.Reason = "never_fits"
)

// Gubernator's behaviour flags that change a decision (its Behavior enum;
// the others, BATCHING, NO_BATCHING, GLOBAL and MULTI_REGION, change where
// gubernator decides, not how).
const (
	Gregorian      = 4
	ResetRemaining = 8
	DrainOverLimit = 32
)

// Version is the gubernator release whose answers a decision gives.
type Version uint8

// The versions New answers as.
const (
	// V221 is gubernator v2.21.0 (the zero Version): a stored OVER_LIMIT
	// status is cleared once the bucket has room, a leaky bucket credits
	// its leak as a fraction on every request and shifts its balance by a
	// change of burst, calendar weeks are periods, months and years have
	// their true length, and a leaky bucket request's MaxWait books hits
	// ahead (StatusScheduled, ReasonNeverFits).
	V221 Version = iota
	// V213 is gubernator v2.13.0.
	V213
)

// Bounds on a gubernator request's numbers. Inside them every integer the
// algorithm computes stays below 2^53, so its Lua twin (which counts in
// doubles) is exact.
const (
	// MaxCreatedAt is the latest created_at, in Unix
	// milliseconds (about the year 2109).
	MaxCreatedAt = int64(1) << 42
	// MaxDuration is the longest duration, in milliseconds.
	MaxDuration = int64(algorithm.MaxWindow / time.Millisecond)
	// gubernatorMaxReset bounds reset_time - created_at, in milliseconds
	// (about 278 years); beyond it the offset saturates.
	gubernatorMaxReset = int64(1) << 43
	// gubernatorMaxRemaining bounds a token bucket's remaining, which
	// negative hits raise without end in gubernator.
	gubernatorMaxRemaining = int64(1) << 52
)

// Params is one gubernator rate limit request, as the algorithm
// decides it: gubernator's RateLimitReq less its name, key and hits (the
// key is the store's, the hits the decision's cost).
type Params struct {
	// Leaky selects LEAKY_BUCKET; false is TOKEN_BUCKET.
	Leaky bool
	// Limit, Duration (milliseconds, or with DURATION_IS_GREGORIAN a
	// calendar period: 0 minute ... 5 year) and Burst (leaky bucket only;
	// 0 means Limit) as gubernator reads them.
	Limit, Duration, Burst int64
	// Behavior is gubernator's flags; Gregorian,
	// ResetRemaining and DrainOverLimit count here.
	Behavior int64
	// CreatedAt is the request's time in Unix milliseconds (gubernator's
	// created_at), which the buckets' arithmetic uses; 0 means the decision's
	// own time. Expiry is judged by the decision's time.
	CreatedAt int64
	// Period is the calendar period of a DURATION_IS_GREGORIAN request, as
	// PeriodAt computes it from the clock; ignored without the flag.
	Period Period
	// Version is the gubernator release whose answers to give.
	Version Version
	// MaxWait is V221's max_wait, in milliseconds: with a leaky bucket, hits
	// that fit within min(MaxWait, WaitCeiling) are booked ahead
	// (ReasonScheduled), charged now; hits above the burst never fit
	// (ReasonNeverFits). 0 is without; V213 ignores it. Such a request is
	// timed by the decision's clock, not CreatedAt, and the caller has
	// refused what gubernator refuses with it (validateMaxWait).
	MaxWait int64
	// WaitCeiling is the server's cap on a booked wait, in milliseconds
	// (gubernator's GUBER_SCHEDULE_MAX_WAIT).
	WaitCeiling int64
}

// gubernator is gubernator's token and leaky buckets for one request's
// parameters. Every instance has the same algorithm.Config, so a key's state is
// shared by requests of any parameters, as gubernator keeps one item per
// key.
//
// State (milliseconds throughout): [0] kind (0 none, 1 token, 2 leaky),
// [1] expiry, [2] limit, [3] duration, [4] remaining (leaky: the bits of a
// float64), [5] creation (token) or last leak (leaky), [6] status (token:
// 1 over limit) or burst (leaky).
type gubernator struct {
	p Params
}

const (
	gubKind = iota
	gubExpire
	gubLimit
	gubDuration
	gubRemaining
	gubTime
	gubStatus // token; gubBurst for leaky
	gubWords
)

const gubBurst = gubStatus

const (
	gubToken = 1
	gubLeaky = 2
)

// New returns the algorithm deciding one gubernator request
// with parameters p. Its decisions are all applied: Allowed is always
// true, as gubernator updates its item whatever the answer; gubernator's
// OVER_LIMIT status is algorithm.Reason algorithm.ReasonOverLimit, and a Gregorian period it
// cannot compute is ReasonBadPeriod (the state keeps what gubernator
// changes before it fails). Limit and Remaining are gubernator's; ResetAfter
// is reset_time - created_at (milliseconds, as a Duration; saturated at
// about 278 years either way), RetryAfter and Delay are zero. The cost is
// gubernator's hits: any number, zero to only read. Record applies hits as a
// gubernator owner applies what GLOBAL peers forward (with
// DRAIN_OVER_LIMIT). The caller checks p against the bounds above.
func New(p Params) algorithm.Algorithm { return &gubernator{p: p} }

var gubConfig = algorithm.Config{Algorithm: Name}

func (g *gubernator) Name() algorithm.Name     { return Name }
func (g *gubernator) Config() algorithm.Config { return gubConfig }
func (g *gubernator) Words() int               { return gubWords }
func (g *gubernator) IdleAfter() time.Duration { return algorithm.MaxWindow + time.Minute }

// Release does nothing: gubernator holds no units.
func (g *gubernator) Release(state []int64, now, cost int64) {}

// Params returns the request's parameters.
func (g *gubernator) Params() Params { return g.p }

// Split returns the algorithm with the limit and burst divided across nodes
// (at least 1 each), for the split arrangement.
func (g *gubernator) Split(nodes int) algorithm.Algorithm {
	if nodes <= 1 {
		return g
	}
	p := g.p
	part := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, v/int64(nodes))
	}
	p.Limit, p.Burst = part(p.Limit), part(p.Burst)
	return &gubernator{p: p}
}

// Decide decides and applies a request of cost hits at now.
func (g *gubernator) Decide(s []int64, now, hits int64) algorithm.Decision {
	return g.decide(s, now, hits, g.p.Behavior, g.p.CreatedAt)
}

// Peek is Decide on a copy of the state.
func (g *gubernator) Peek(s []int64, now, hits int64) algorithm.Decision {
	var c [gubWords]int64
	copy(c[:], s)
	return g.decide(c[:], now, hits, g.p.Behavior, g.p.CreatedAt)
}

// Record applies hits at now as an owner applies forwarded GLOBAL hits.
func (g *gubernator) Record(s []int64, now, hits int64) {
	g.decide(s, now, hits, g.p.Behavior|DrainOverLimit, 0)
}

func (g *gubernator) decide(s []int64, now, hits, behavior, createdAt int64) algorithm.Decision {
	s = s[:gubWords:gubWords]
	nowMS := max(now, 0) / 1e6
	if createdAt == 0 {
		createdAt = nowMS
	}
	// An expired item, or one no version of this algorithm wrote, is no item.
	if s[gubKind] != gubToken && s[gubKind] != gubLeaky || s[gubExpire] < nowMS {
		clear(s)
	}
	r := gubReq{p: &g.p, behavior: behavior, createdAt: createdAt, hits: hits, now: nowMS}
	switch {
	case g.p.Leaky && g.p.Version == V213:
		return r.leaky(s)
	case g.p.Leaky:
		return r.leaky221(s)
	case g.p.Version == V213:
		return r.token(s)
	}
	return r.token221(s)
}

// gubReq is one decision's request.
type gubReq struct {
	p         *Params
	behavior  int64
	createdAt int64
	hits      int64
	now       int64 // the decision's time, in milliseconds
}

func (r *gubReq) has(flag int64) bool { return r.behavior&flag != 0 }

// answer builds the decision for a gubernator answer.
func (r *gubReq) answer(over bool, limit, remaining, reset int64) algorithm.Decision {
	off := reset - r.createdAt
	off = min(max(off, -gubernatorMaxReset), gubernatorMaxReset)
	d := algorithm.Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: time.Duration(off) * time.Millisecond}
	if over {
		d.Reason = algorithm.ReasonOverLimit
	}
	return d
}

// badPeriod is the decision of a request whose calendar period gubernator
// cannot compute.
func (r *gubReq) badPeriod() algorithm.Decision {
	return algorithm.Decision{Allowed: true, Limit: r.p.Limit, Reason: ReasonBadPeriod}
}

// token is gubernator v2.13.0's tokenBucket.
func (r *gubReq) token(s []int64) algorithm.Decision {
	p := r.p
	if d, done := r.openToken(s); done {
		return d
	}
	over, remaining, reset := s[gubStatus] == 1, s[gubRemaining], s[gubExpire]
	if d, bad := r.retuneDuration(s, &reset); bad {
		return d
	}
	switch {
	case r.hits == 0:
	case remaining == 0 && r.hits > 0:
		over = true
		s[gubStatus] = 1
	case s[gubRemaining] == r.hits:
		s[gubRemaining], remaining = 0, 0
	case r.hits > s[gubRemaining]:
		over = true
		if r.has(DrainOverLimit) {
			s[gubRemaining], remaining = 0, 0
		}
	default:
		s[gubRemaining] = min(s[gubRemaining]-r.hits, gubernatorMaxRemaining)
		remaining = s[gubRemaining]
	}
	return r.answer(over, p.Limit, remaining, reset)
}

// openToken is how both versions' tokenBucket begin: RESET_REMAINING and a
// state of another kind end the request (done); otherwise a changed limit
// moves the remaining count by the change.
func (r *gubReq) openToken(s []int64) (d algorithm.Decision, done bool) {
	p := r.p
	if s[gubKind] != 0 && r.has(ResetRemaining) {
		clear(s)
		return r.answer(false, p.Limit, p.Limit, 0), true
	}
	if s[gubKind] != gubToken {
		clear(s)
		return r.newToken(s), true
	}
	if s[gubLimit] != p.Limit {
		s[gubRemaining] = min(max(s[gubRemaining]+p.Limit-s[gubLimit], 0), gubernatorMaxRemaining)
		s[gubLimit] = p.Limit
	}
	return algorithm.Decision{}, false
}

// retuneDuration applies a changed duration to a token bucket as both
// versions do, setting *reset to the new expiry; bad is set, with its
// decision, when the calendar period cannot be computed.
func (r *gubReq) retuneDuration(s []int64, reset *int64) (d algorithm.Decision, bad bool) {
	p := r.p
	if s[gubDuration] == p.Duration {
		return d, false
	}
	expire := s[gubTime] + p.Duration
	if r.has(Gregorian) {
		if p.Period.Invalid {
			return r.badPeriod(), true
		}
		expire = p.Period.End
	}
	if expire <= r.createdAt {
		expire = r.createdAt + p.Duration
		s[gubTime] = r.createdAt
		s[gubRemaining] = s[gubLimit]
	}
	s[gubExpire], s[gubDuration], *reset = expire, p.Duration, expire
	return d, false
}

// token221 is gubernator v2.21.0's tokenBucket: token's arithmetic, but the
// stored OVER_LIMIT status is answered only while the bucket is empty, and
// cleared by any request that finds room.
func (r *gubReq) token221(s []int64) algorithm.Decision {
	p := r.p
	if d, done := r.openToken(s); done {
		return d
	}
	reset := s[gubExpire]
	if d, bad := r.retuneDuration(s, &reset); bad {
		return d
	}
	remaining := s[gubRemaining]
	switch {
	case r.hits == 0:
		if remaining != 0 {
			s[gubStatus] = 0
		}
		return r.answer(remaining == 0 && s[gubStatus] == 1, p.Limit, remaining, reset)
	case remaining == 0 && r.hits > 0:
		s[gubStatus] = 1
		return r.answer(true, p.Limit, remaining, reset)
	}
	s[gubStatus] = 0
	over := false
	switch {
	case remaining == r.hits:
		s[gubRemaining], remaining = 0, 0
	case r.hits > remaining:
		over = true
		if r.has(DrainOverLimit) {
			s[gubRemaining], remaining = 0, 0
		}
	default:
		s[gubRemaining] = min(s[gubRemaining]-r.hits, gubernatorMaxRemaining)
		remaining = s[gubRemaining]
	}
	return r.answer(over, p.Limit, remaining, reset)
}

// newToken is gubernator's tokenBucketNewItem on an empty state (the same
// in both versions).
func (r *gubReq) newToken(s []int64) algorithm.Decision {
	p := r.p
	expire := r.createdAt + p.Duration
	if r.has(Gregorian) {
		if p.Period.Invalid {
			return r.badPeriod()
		}
		expire = p.Period.End
	}
	remaining, over := p.Limit-r.hits, false
	if r.hits > p.Limit {
		remaining, over = p.Limit, true
	}
	s[gubKind], s[gubExpire], s[gubLimit], s[gubDuration] = gubToken, expire, p.Limit, p.Duration
	s[gubRemaining], s[gubTime], s[gubStatus] = min(remaining, gubernatorMaxRemaining), r.createdAt, 0
	return r.answer(over, p.Limit, remaining, expire)
}

// truncFloat is Go's int64(x) on amd64, where gubernator is built: x
// truncated toward zero, and the most negative int64 for NaN and values
// out of range.
func truncFloat(x float64) int64 {
	if x != x || x >= 0x1p63 || x < -0x1p63 {
		return math.MinInt64
	}
	return int64(x)
}

// mulSat returns a*b saturated at ±gubernatorMaxReset; a and b are below
// 2^62 in magnitude, so the product's sign and size are read from doubles.
func mulSat(a, b int64) int64 {
	f := float64(a) * float64(b)
	if f >= float64(gubernatorMaxReset) {
		return gubernatorMaxReset
	}
	if f <= -float64(gubernatorMaxReset) {
		return -gubernatorMaxReset
	}
	return a * b
}
