package gubernator

import (
	"math"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// leaky is gubernator v2.13.0's leakyBucket.
func (r *gubReq) leaky(s []int64) algorithm.Decision {
	p := r.p
	burst := r.burst()
	if s[gubKind] != gubLeaky {
		clear(s)
		return r.newLeaky(s, burst)
	}
	rem := math.Float64frombits(uint64(s[gubRemaining]))
	if r.has(ResetRemaining) {
		rem = float64(burst)
	}
	if s[gubBurst] != burst {
		if burst > truncFloat(rem) {
			rem = float64(burst)
		}
		s[gubBurst] = burst
	}
	s[gubLimit], s[gubDuration] = p.Limit, p.Duration
	defer func() { s[gubRemaining] = int64(math.Float64bits(rem)) }()
	duration, rate, ok := r.leakRate()
	if !ok {
		return r.badPeriod()
	}
	if r.hits != 0 {
		s[gubExpire] = r.createdAt + duration
	}
	elapsed := r.createdAt - s[gubTime]
	leak := float64(elapsed) / rate
	if truncFloat(leak) > 0 {
		rem += leak
		s[gubTime] = r.createdAt
	}
	if truncFloat(rem) > burst {
		rem = float64(burst)
	}
	limit, irate := p.Limit, truncFloat(rate)
	reset := func(remaining int64) int64 { return r.createdAt + mulSat(limit-remaining, irate) }
	remaining := truncFloat(rem)
	switch {
	case remaining == 0 && r.hits > 0:
		return r.answer(true, limit, remaining, reset(remaining))
	case remaining == r.hits:
		rem = 0
		return r.answer(false, limit, 0, reset(0))
	case r.hits > remaining:
		at := reset(remaining)
		if r.has(DrainOverLimit) {
			rem, remaining = 0, 0
		}
		return r.answer(true, limit, remaining, at)
	case r.hits == 0:
		return r.answer(false, limit, remaining, reset(remaining))
	}
	rem -= float64(r.hits)
	remaining = truncFloat(rem)
	return r.answer(false, limit, remaining, reset(remaining))
}

// newLeaky is gubernator v2.13.0's leakyBucketNewItem on an empty state.
func (r *gubReq) newLeaky(s []int64, burst int64) algorithm.Decision {
	p := r.p
	duration := p.Duration
	rate := float64(duration) / float64(p.Limit)
	if r.has(Gregorian) {
		if p.Period.Invalid {
			return r.badPeriod()
		}
		duration = p.Period.End - p.Period.Now
	}
	irate := truncFloat(rate)
	remaining, over := burst-r.hits, false
	if r.hits > burst {
		remaining, over = 0, true
	}
	s[gubKind], s[gubExpire], s[gubLimit], s[gubDuration] = gubLeaky, r.createdAt+duration, p.Limit, duration
	s[gubRemaining], s[gubTime], s[gubBurst] = int64(math.Float64bits(float64(remaining))), r.createdAt, burst
	return r.answer(over, p.Limit, remaining, r.createdAt+mulSat(p.Limit-remaining, irate))
}

// leaky221 is gubernator v2.21.0's leakyBucket: the leak is credited as a
// fraction on every request, a change of burst shifts the balance, the
// balance never passes the burst, and a request with MaxWait may book hits
// ahead, leaving the balance below zero (a debt, timed by the decision's
// clock and kept until the bucket is full again).
func (r *gubReq) leaky221(s []int64) algorithm.Decision {
	p := r.p
	burst := r.burst()
	if s[gubKind] != gubLeaky {
		clear(s)
		return r.newLeaky221(s, burst)
	}
	rem := math.Float64frombits(uint64(s[gubRemaining]))
	defer func() { s[gubRemaining] = int64(math.Float64bits(rem)) }()
	createdAt := r.createdAt
	if p.MaxWait > 0 || rem < 0 {
		createdAt = r.now
	}
	s[gubLimit], s[gubDuration] = p.Limit, p.Duration
	duration, rate, ok := r.leakRate()
	if !ok {
		return r.badPeriod()
	}
	inDebt := rem < 0 && !r.has(ResetRemaining)
	burstChanged := s[gubBurst] != burst
	if r.hits != 0 && !inDebt {
		s[gubExpire] = createdAt + duration
	}
	if createdAt > s[gubTime] {
		if leak := float64(createdAt-s[gubTime]) / rate; leak == leak {
			rem += leak
		}
		s[gubTime] = createdAt
	}
	if burstChanged {
		if snapToZero(rem) >= 0 {
			rem = math.Max(0, rem+float64(burst-s[gubBurst]))
		}
		s[gubBurst] = burst
	}
	if r.has(ResetRemaining) {
		rem = float64(burst)
	}
	rem = snapToZero(math.Min(float64(burst), rem))
	if inDebt && burstChanged {
		// gubernator extends a debt's expiry after everything else.
		defer func() { r.extendDebt(s, createdAt, duration, rate, rem) }()
	}
	limit, irate := p.Limit, truncFloat(rate)
	reset := func(remaining int64) int64 { return createdAt + mulSat(limit-remaining, irate) }
	d := r.answer(false, limit, max(0, wholeTokens(rem)), reset(wholeTokens(rem)))
	if rem < 0 {
		d = r.answer(false, limit, 0, fullAt(s[gubTime], burst, rem, rate))
	}
	switch {
	case r.hits == 0:
		return d
	case p.MaxWait > 0:
		return r.schedule(s, &rem, d, createdAt, duration, rate, inDebt)
	case r.hits < 0 && rem < 0:
		r.extendDebt(s, createdAt, duration, rate, rem)
		return d
	case r.hits > wholeTokens(rem):
		d.Reason = algorithm.ReasonOverLimit
		if r.has(DrainOverLimit) {
			rem = math.Min(rem, 0)
			d.Remaining = 0
		}
		return d
	}
	rem = snapToZero(math.Min(float64(burst), rem-float64(r.hits)))
	remaining := wholeTokens(rem)
	if inDebt {
		r.extendDebt(s, createdAt, duration, rate, rem)
	}
	return r.answer(false, limit, remaining, reset(remaining))
}

// schedule is gubernator v2.21.0's scheduleHits: a MaxWait request for a
// positive number of hits is admitted, booked ahead when its hits fit
// within the wait allowed, or refused with nothing charged. d is the
// answer without hits.
func (r *gubReq) schedule(s []int64, rem *float64, d algorithm.Decision, now, duration int64, rate float64, inDebt bool) algorithm.Decision {
	p, burst := r.p, s[gubBurst]
	if r.hits > burst || !(rate > 0) || math.IsInf(rate, 0) {
		d.Reason = ReasonNeverFits
		return d
	}
	if r.hits <= wholeTokens(*rem) {
		*rem = snapToZero(*rem - float64(r.hits))
		remaining := max(0, wholeTokens(*rem))
		if inDebt {
			r.extendDebt(s, now, duration, rate, *rem)
		}
		return r.answer(false, p.Limit, remaining, now+mulSat(p.Limit-remaining, truncFloat(rate)))
	}
	// The 1e-6 keeps float error from rounding an exact wait up.
	need := float64(max(s[gubTime], now)-now) + float64((float64(r.hits)-*rem)*rate)
	wait := max(1, satMillis(math.Ceil(need-1e-6)))
	if wait > min(p.MaxWait, p.WaitCeiling) {
		d.Reason, d.RetryAfter = algorithm.ReasonOverLimit, time.Duration(wait)*time.Millisecond
		return d
	}
	*rem -= float64(r.hits)
	d = r.answer(false, p.Limit, 0, fullAt(s[gubTime], burst, *rem, rate))
	d.Reason, d.RetryAfter = ReasonScheduled, time.Duration(wait)*time.Millisecond
	r.extendDebt(s, now, duration, rate, *rem)
	return d
}

// extendDebt is gubernator's extendDebtExpiry: a key in debt is kept until
// its balance is back at the burst.
func (r *gubReq) extendDebt(s []int64, now, duration int64, rate, rem float64) {
	s[gubExpire] = max(s[gubExpire], now+duration, fullAt(s[gubTime], s[gubBurst], rem, rate))
}

// fullAt is gubernator's fullAt: when a balance rem, last credited at
// updated, is back at burst, in Unix milliseconds (saturated at
// gubernatorMaxReset beyond updated).
func fullAt(updated, burst int64, rem, rate float64) int64 {
	ahead := math.Ceil(float64(updated) + float64((float64(burst)-rem)*rate))
	return updated + satMillis(ahead-float64(updated))
}

// satMillis is gubernator's millis for the times a decision can meet:
// f truncated, saturated at ±gubernatorMaxReset.
func satMillis(f float64) int64 {
	return int64(min(max(f, -float64(gubernatorMaxReset)), float64(gubernatorMaxReset)))
}

// newLeaky221 is gubernator v2.21.0's leakyBucketNewItem on an empty state.
func (r *gubReq) newLeaky221(s []int64, burst int64) algorithm.Decision {
	p := r.p
	createdAt := r.createdAt
	if p.MaxWait > 0 {
		createdAt = r.now
	}
	duration := p.Duration
	irate := truncFloat(float64(duration) / float64(p.Limit))
	if r.has(Gregorian) {
		if p.Period.Invalid {
			return r.badPeriod()
		}
		duration = p.Period.End - p.Period.Now
	}
	if p.MaxWait > 0 && r.hits > burst {
		d := r.answer(false, p.Limit, burst, createdAt+mulSat(p.Limit-burst, irate))
		d.Reason = ReasonNeverFits
		return d
	}
	remaining, over := min(burst, burst-r.hits), false
	if r.hits > burst {
		remaining, over = 0, true
	}
	s[gubKind], s[gubExpire], s[gubLimit], s[gubDuration] = gubLeaky, createdAt+duration, p.Limit, duration
	s[gubRemaining], s[gubTime], s[gubBurst] = int64(math.Float64bits(float64(remaining))), createdAt, burst
	return r.answer(over, p.Limit, remaining, createdAt+mulSat(p.Limit-remaining, irate))
}

// snapToZero is gubernator's: a balance within 1e-9 of zero is zero.
func snapToZero(balance float64) float64 {
	if math.Abs(balance) < 1e-9 {
		return 0
	}
	return balance
}

// wholeTokens is gubernator's: the tokens a balance can spend, with an
// epsilon against float error.
func wholeTokens(balance float64) int64 { return truncFloat(balance + 1e-9) }

// burst is the request's burst, or its limit when it names none (both
// versions).
func (r *gubReq) burst() int64 {
	if r.p.Burst == 0 {
		return r.p.Limit
	}
	return r.p.Burst
}

// leakRate is how both versions time a live leaky bucket: the duration
// until its reset and the milliseconds per unit leaked, from the request's
// duration or, with DURATION_IS_GREGORIAN, its calendar period; ok is false
// when the period cannot be computed.
func (r *gubReq) leakRate() (duration int64, rate float64, ok bool) {
	p := r.p
	if !r.has(Gregorian) {
		return p.Duration, float64(p.Duration) / float64(p.Limit), true
	}
	if p.Period.Invalid {
		return 0, 0, false
	}
	return p.Period.End - p.Period.Now, float64(p.Period.Length) / float64(p.Limit), true
}
