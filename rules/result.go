package rules

import (
	"time"
)

// Holds reports whether an allowed result holds units that must be
// released, with its Lease, when the request ends.
func (res Result) Holds() bool { return res.Allowed && res.Lease != "" }

// Delay returns how long an allowed request must wait before it proceeds:
// the longest Delay a leaky-bucket rule that is not in shadow mode gave it.
// It is zero for a rejected request.
func (res Result) Delay() time.Duration {
	var d time.Duration
	if !res.Allowed {
		return 0
	}
	for _, s := range res.Statuses {
		if !s.Shadow && s.Decision.Delay > d {
			d = s.Decision.Delay
		}
	}
	return d
}

// RetryAfter returns how long a rejected request should wait before it is
// tried again: the longest RetryAfter of the rules that rejected it. It is
// zero when res allows the request, and zero when no wait would help (a
// cost above the limit).
func (res Result) RetryAfter() time.Duration {
	if res.Allowed {
		return 0
	}
	var d time.Duration
	for _, s := range res.Statuses {
		if !s.Shadow && !s.Decision.Allowed && s.Decision.RetryAfter > d {
			d = s.Decision.RetryAfter
		}
	}
	return d
}
