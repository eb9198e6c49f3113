package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
)

// Header field names written by SetHeaders.
const (
	HeaderRetryAfter         = "Retry-After"
	HeaderXRateLimitLimit    = "X-RateLimit-Limit"
	HeaderXRateLimitRemain   = "X-RateLimit-Remaining"
	HeaderXRateLimitReset    = "X-RateLimit-Reset"
	HeaderRateLimitPolicy    = "RateLimit-Policy"
	HeaderRateLimit          = "RateLimit"
	headerQuotaUnitConcurent = "concurrent-requests"
)

// Field is one response header field.
type Field struct {
	Name, Value string
}

// Fields returns the rate-limit header fields that describe res:
//
//   - X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, for the
//     tightest rule. X-RateLimit-Reset is in delta-seconds (seconds from now
//     until the rule's allowance is fully back, rounded up), not a Unix time.
//   - RateLimit-Policy and RateLimit as draft-ietf-httpapi-ratelimit-headers-11
//     defines them, one list member per rule that applied:
//     `"rule";q=LIMIT;w=WINDOW_SECONDS` and `"rule";r=REMAINING;t=SECONDS`,
//     where t is the time until the rule's allowance is fully back, or for a
//     rule that rejected, until the request could pass (so that Retry-After
//     never points before the end of the effective window, as the draft
//     asks). Windows that are not whole seconds are rounded up; concurrency
//     rules have no window and say qu="concurrent-requests" instead.
//   - Retry-After, in seconds rounded up (at least 1), when res rejects.
//
// Shadow and unlimited rules are left out: they never reject, and a client
// should not pace itself by them. A rule that applied to several descriptors
// is described once, by its most restrictive status.
func Fields(res rules.Result) []Field {
	var ends [len(fieldNames)]int
	buf, n := appendFields(nil, &ends, res)
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

// appendFields appends the values of the fields Fields returns, one after
// the other, to buf, records where each ends in ends, and returns how many
// there are. Every value is cut out of one string by the callers: a
// handful of allocations per response instead of one per number.
func appendFields(buf []byte, ends *[len(fieldNames)]int, res rules.Result) ([]byte, int) {
	var arr [8]rules.Status
	sts := visible(res, arr[:0])
	if len(sts) == 0 {
		return buf, 0
	}
	tight := tightest(res, sts)
	n := 0
	buf = strconv.AppendInt(buf, tight.Limit, 10)
	ends[n], n = len(buf), n+1
	buf = strconv.AppendInt(buf, tight.Decision.Remaining, 10)
	ends[n], n = len(buf), n+1
	buf = strconv.AppendInt(buf, seconds(tight.Decision.ResetAfter), 10)
	ends[n], n = len(buf), n+1
	for i := range sts {
		s := &sts[i]
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendSFString(buf, s.Rule)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, s.Limit, 10)
		if s.Algorithm == algorithm.Concurrency || s.Window <= 0 {
			buf = append(buf, `;qu="`+headerQuotaUnitConcurent+`"`...)
		} else {
			buf = append(buf, ";w="...)
			buf = strconv.AppendInt(buf, max(1, seconds(s.Window)), 10)
		}
	}
	ends[n], n = len(buf), n+1
	for i := range sts {
		s := &sts[i]
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendSFString(buf, s.Rule)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, s.Decision.Remaining, 10)
		buf = append(buf, ";t="...)
		if s.Decision.Allowed {
			buf = strconv.AppendInt(buf, seconds(s.Decision.ResetAfter), 10)
		} else {
			// A rejecting rule's effective window ends when the request
			// could pass, so Retry-After never points before it.
			buf = strconv.AppendInt(buf, seconds(s.Decision.RetryAfter), 10)
		}
	}
	ends[n], n = len(buf), n+1
	if !res.Allowed {
		buf = strconv.AppendInt(buf, retryAfterSeconds(res), 10)
		ends[n], n = len(buf), n+1
	}
	return buf, n
}

// fieldNames are the names Fields writes, in its order.
var fieldNames = [...]string{HeaderXRateLimitLimit, HeaderXRateLimitRemain, HeaderXRateLimitReset,
	HeaderRateLimitPolicy, HeaderRateLimit, HeaderRetryAfter}

// canonicalNames are fieldNames in canonical MIME form, the keys
// http.Header uses.
var canonicalNames = func() (c [len(fieldNames)]string) {
	for i, n := range fieldNames {
		c[i] = http.CanonicalHeaderKey(n)
	}
	return c
}()

// SetHeaders sets the fields Fields returns on h, replacing any values they
// had. It allocates twice: the values' one string and their one slice.
func SetHeaders(h http.Header, res rules.Result) {
	var stack [256]byte
	var ends [len(fieldNames)]int
	buf, n := appendFields(stack[:0], &ends, res)
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

// retryAfterSeconds returns the Retry-After value of a rejected request:
// res.RetryAfter in whole seconds, rounded up, at least 1. It returns 0 when
// res allows the request.
func retryAfterSeconds(res rules.Result) int64 {
	if res.Allowed {
		return 0
	}
	return max(1, seconds(res.RetryAfter()))
}

// visible appends to dst the statuses the headers describe: limited, not
// shadow, one per rule (the most restrictive), in rule order.
func visible(res rules.Result, dst []rules.Status) []rules.Status {
	out := dst
	for _, s := range res.Statuses {
		if s.Shadow || s.Unlimited {
			continue
		}
		dup := false
		for j := range out {
			if out[j].Rule == s.Rule {
				dup = true
				if rules.Tighter(&s, &out[j]) {
					out[j] = s
				}
				break
			}
		}
		if !dup {
			out = append(out, s)
		}
	}
	return out
}

// tightest returns the status the X-RateLimit fields describe: the engine's
// choice when it is visible, else the tightest visible one.
func tightest(res rules.Result, sts []rules.Status) rules.Status {
	if res.Tightest >= 0 && res.Tightest < len(res.Statuses) {
		t := res.Statuses[res.Tightest]
		if !t.Shadow && !t.Unlimited {
			return t
		}
	}
	best := sts[0]
	for _, s := range sts[1:] {
		if rules.Tighter(&s, &best) {
			best = s
		}
	}
	return best
}

// seconds rounds d up to whole seconds; negative durations are 0.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString renders s as a structured-field string (RFC 9651): quoted, with
// '"' and '\' escaped; bytes outside printable ASCII, which an sf-string
// cannot hold, become '?'.
func sfString(s string) string { return string(appendSFString(nil, s)) }

// appendSFString appends s to b as sfString renders it.
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
