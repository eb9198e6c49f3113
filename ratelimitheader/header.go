// Package ratelimitheader writes the standard rate-limit response header
// fields from limiter decisions: Retry-After, X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, and RateLimit-Policy and
// RateLimit as draft-ietf-httpapi-ratelimit-headers defines them. It is
// shared by the net/http middleware, the gRPC interceptors (as metadata)
// and the rule engine's front ends, and depends on nothing but package
// algorithm, so that any of them can describe a decision without linking
// the others.
package ratelimitheader

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Names of the header fields Fields returns.
const (
	RetryAfter          = "Retry-After"
	XRateLimitLimit     = "X-RateLimit-Limit"
	XRateLimitRemaining = "X-RateLimit-Remaining"
	XRateLimitReset     = "X-RateLimit-Reset"
	RateLimitPolicy     = "RateLimit-Policy"
	RateLimit           = "RateLimit"
)

// quotaUnitConcurrent is the quota unit of a limit on requests in flight.
const quotaUnitConcurrent = "concurrent-requests"

// Field is one response header field.
type Field struct {
	Name, Value string
}

// Limit is one limit a request was decided against.
type Limit struct {
	// Name names the limit in RateLimit-Policy and RateLimit.
	Name string
	// Limit is the number of requests (or units) the limit allows.
	Limit int64
	// Window is the limit's window; zero or less means a limit on requests
	// in flight (qu="concurrent-requests").
	Window time.Duration
	// Decision is the limit's decision on the request.
	Decision algorithm.Decision
}

// Outcome is what the header fields describe: the limits a request was
// decided against and whether it was rejected.
type Outcome struct {
	// Limits are the limits that applied, one list member each in
	// RateLimit-Policy and RateLimit, in this order. With none, Fields
	// returns nothing.
	Limits []Limit
	// Tightest is the limit X-RateLimit-Limit, -Remaining and -Reset
	// describe: the most restrictive of Limits.
	Tightest Limit
	// Rejected reports that the request was rejected; Retry-After is
	// written only then.
	Rejected bool
	// RetryAfter is how long a rejected request should wait.
	RetryAfter time.Duration
}

// ForDecision is the outcome of one limiter's decision d, the limit named
// name with the given window (zero or less for a limit on requests in
// flight).
func ForDecision(name string, window time.Duration, d algorithm.Decision) Outcome {
	l := Limit{Name: name, Limit: d.Limit, Window: window, Decision: d}
	return Outcome{Limits: []Limit{l}, Tightest: l, Rejected: !d.Allowed, RetryAfter: d.RetryAfter}
}

// Fields returns the header fields that describe o:
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, for
//     o.Tightest. X-RateLimit-Reset is in delta-seconds (seconds from now
//     until the limit's allowance is fully back, rounded up), not a Unix
//     time.
//   - RateLimit-Policy and RateLimit as draft-ietf-httpapi-ratelimit-headers-11
//     defines them, one list member per limit:
//     `"name";q=LIMIT;w=WINDOW_SECONDS` and `"name";r=REMAINING;t=SECONDS`,
//     where t is the time until the limit's allowance is fully back, or for
//     a limit that rejected, until the request could pass (so that
//     Retry-After never points before the end of the effective window, as
//     the draft asks). Windows that are not whole seconds are rounded up;
//     limits on requests in flight have no window and say
//     qu="concurrent-requests" instead.
//   - Retry-After, in seconds rounded up (at least 1), when o.Rejected.
func Fields(o Outcome) []Field {
	var ends [len(fieldNames)]int
	buf, n := appendFields(nil, &ends, &o)
	if n == 0 {
		return nil
	}
	all := string(buf)
	out := make([]Field, n)
	from := 0
	for i := 0; i < n; i++ {
		out[i] = Field{fieldNames[i], all[from:ends[i]]}
		from = ends[i]
	}
	return out
}

// Set sets the fields Fields returns on h, replacing any values they had.
// It allocates twice: the values' one string and their one slice.
func Set(h http.Header, o Outcome) {
	var stack [256]byte
	var ends [len(fieldNames)]int
	buf, n := appendFields(stack[:0], &ends, &o)
	if n == 0 {
		return
	}
	all := string(buf)
	vals := make([]string, n)
	from := 0
	for i := 0; i < n; i++ {
		vals[i] = all[from:ends[i]]
		from = ends[i]
		h[canonicalNames[i]] = vals[i : i+1 : i+1]
	}
}

// fieldNames are the names Fields writes, in its order.
var fieldNames = [...]string{XRateLimitLimit, XRateLimitRemaining, XRateLimitReset,
	RateLimitPolicy, RateLimit, RetryAfter}

// canonicalNames are fieldNames in canonical MIME form, the keys
// http.Header uses.
var canonicalNames = func() (c [len(fieldNames)]string) {
	for i, n := range fieldNames {
		c[i] = http.CanonicalHeaderKey(n)
	}
	return c
}()

// appendFields appends the values of the fields Fields returns, one after
// the other, to buf, records where each ends in ends, and returns how many
// there are. Every value is cut out of one string by the callers: a
// handful of allocations per response instead of one per number.
func appendFields(buf []byte, ends *[len(fieldNames)]int, o *Outcome) ([]byte, int) {
	if len(o.Limits) == 0 {
		return buf, 0
	}
	n := 0
	buf = strconv.AppendInt(buf, o.Tightest.Limit, 10)
	ends[n], n = len(buf), n+1
	buf = strconv.AppendInt(buf, o.Tightest.Decision.Remaining, 10)
	ends[n], n = len(buf), n+1
	buf = strconv.AppendInt(buf, seconds(o.Tightest.Decision.ResetAfter), 10)
	ends[n], n = len(buf), n+1
	for i := range o.Limits {
		l := &o.Limits[i]
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendSFString(buf, l.Name)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, l.Limit, 10)
		if l.Window <= 0 {
			buf = append(buf, `;qu="`+quotaUnitConcurrent+`"`...)
		} else {
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, max(1, seconds(l.Window)), 10)
		}
	}
	ends[n], n = len(buf), n+1
	for i := range o.Limits {
		l := &o.Limits[i]
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendSFString(buf, l.Name)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, l.Decision.Remaining, 10)
		buf = append(buf, ";t="...)
		if l.Decision.Allowed {
			buf = strconv.AppendInt(buf, seconds(l.Decision.ResetAfter), 10)
		} else {
			// A rejecting limit's effective window ends when the request
			// could pass, so Retry-After never points before it.
			buf = strconv.AppendInt(buf, seconds(l.Decision.RetryAfter), 10)
		}
	}
	ends[n], n = len(buf), n+1
	if o.Rejected {
		buf = strconv.AppendInt(buf, RetryAfterSeconds(o.RetryAfter), 10)
		ends[n], n = len(buf), n+1
	}
	return buf, n
}

// RetryAfterSeconds is the Retry-After value of a rejected request that
// should wait d: whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, seconds(d))
}

// seconds rounds d up to whole seconds; negative durations are 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// appendSFString appends s to b as a structured-field string (RFC 9651):
// quoted, with '"' and '\' escaped; bytes outside printable ASCII, which
// an sf-string cannot hold, become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
