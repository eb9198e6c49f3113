package httplimit

import (
	"net/http"
	"strconv"
	"strings"
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
//     `"rule";q=LIMIT;w=WINDOW_SECONDS` and `"rule";r=REMAINING;t=RESET_SECONDS`.
//     Windows that are not whole seconds are rounded up; concurrency rules
//     have no window and say qu="concurrent-requests" instead.
//   - Retry-After, in seconds rounded up (at least 1), when res rejects.
//
// Shadow and unlimited rules are left out: they never reject, and a client
// should not pace itself by them. A rule that applied to several descriptors
// is described once, by its most restrictive status.
func Fields(res rules.Result) []Field {
	sts := visible(res)
	if len(sts) == 0 {
		return nil
	}
	out := make([]Field, 0, 6)
	tight := tightest(res, sts)
	out = append(out,
		Field{HeaderXRateLimitLimit, strconv.FormatInt(tight.Limit, 10)},
		Field{HeaderXRateLimitRemain, strconv.FormatInt(tight.Decision.Remaining, 10)},
		Field{HeaderXRateLimitReset, strconv.FormatInt(seconds(tight.Decision.ResetAfter), 10)},
	)
	var policy, state strings.Builder
	policy.Grow(len(sts) * 48)
	state.Grow(len(sts) * 40)
	for i, s := range sts {
		if i > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		name := sfString(s.Rule)
		policy.WriteString(name)
		policy.WriteString(";q=")
		policy.WriteString(strconv.FormatInt(s.Limit, 10))
		if s.Algorithm == algorithm.Concurrency || s.Window <= 0 {
			policy.WriteString(`;qu="` + headerQuotaUnitConcurent + `"`)
		} else {
			policy.WriteString(";w=")
			policy.WriteString(strconv.FormatInt(max(1, seconds(s.Window)), 10))
		}
		state.WriteString(name)
		state.WriteString(";r=")
		state.WriteString(strconv.FormatInt(s.Decision.Remaining, 10))
		state.WriteString(";t=")
		state.WriteString(strconv.FormatInt(seconds(s.Decision.ResetAfter), 10))
	}
	out = append(out, Field{HeaderRateLimitPolicy, policy.String()}, Field{HeaderRateLimit, state.String()})
	if !res.Allowed {
		out = append(out, Field{HeaderRetryAfter, strconv.FormatInt(RetryAfter(res), 10)})
	}
	return out
}

// SetHeaders sets the fields Fields returns on h.
func SetHeaders(h http.Header, res rules.Result) {
	for _, f := range Fields(res) {
		h.Set(f.Name, f.Value)
	}
}

// RetryAfter returns how many whole seconds (rounded up, at least 1) a
// rejected request should wait: the longest RetryAfter of the rules that
// rejected it. It returns 0 when res allows the request.
func RetryAfter(res rules.Result) int64 {
	if res.Allowed {
		return 0
	}
	var d time.Duration
	for _, s := range res.Statuses {
		if !s.Shadow && !s.Decision.Allowed && s.Decision.RetryAfter > d {
			d = s.Decision.RetryAfter
		}
	}
	return max(1, seconds(d))
}

// visible returns the statuses the headers describe: limited, not shadow,
// one per rule (the most restrictive), in rule order.
func visible(res rules.Result) []rules.Status {
	var out []rules.Status
	for _, s := range res.Statuses {
		if s.Shadow || s.Unlimited {
			continue
		}
		dup := false
		for j := range out {
			if out[j].Rule == s.Rule {
				dup = true
				if tighter(s, out[j]) {
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
		if tighter(s, best) {
			best = s
		}
	}
	return best
}

// tighter reports whether a is more restrictive than b: a rejection before
// an acceptance, a longer wait, or less allowance left relative to the limit.
func tighter(a, b rules.Status) bool {
	if a.Decision.Allowed != b.Decision.Allowed {
		return !a.Decision.Allowed
	}
	if !a.Decision.Allowed {
		return a.Decision.RetryAfter > b.Decision.RetryAfter
	}
	// a.Remaining/a.Limit < b.Remaining/b.Limit, without division.
	return a.Decision.Remaining*max(1, b.Limit) < b.Decision.Remaining*max(1, a.Limit)
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
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
