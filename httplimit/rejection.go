package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
)

// Rejection is the JSON body of a 429 response. It is an RFC 9457 problem
// detail of the "quota-exceeded" type draft-ietf-httpapi-ratelimit-headers
// defines (type, title, violated-policies), with Floodgate's own members.
type Rejection struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	ViolatedPolicies []string `json:"violated-policies"`

	Error string `json:"error"`
	// Rule is the rejecting rule with the longest wait; Rules lists every
	// rule that rejected.
	Rule  string   `json:"rule"`
	Rules []string `json:"rules"`
	Limit int64    `json:"limit"`
	// Window is the window as rule files write it ("1m"); WindowSeconds
	// is the same in seconds.
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"window_seconds"`
	Remaining     int64   `json:"remaining"`
	// RetryAfter is the number of seconds to wait, as in Retry-After.
	RetryAfter int64 `json:"retry_after"`
	// Reason is the rejecting rule's reason, one of algorithm's Reason
	// constants (over_limit, ...); Message says the same for people.
	Reason  algorithm.Reason `json:"reason,omitempty"`
	Message string           `json:"message,omitempty"`
}

// ProblemQuotaExceeded is the problem type of a 429 body.
const ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// appendJSON appends rej to b as encoding/json's Encoder writes it (HTML
// characters escaped, a newline at the end), without linking
// encoding/json and its reflection into every program that limits
// requests. A test holds the two equal.
func (rej *Rejection) appendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, rej.Type)
	b = append(b, `,"title":`...)
	b = appendJSONString(b, rej.Title)
	b = append(b, `,"violated-policies":`...)
	b = appendJSONStrings(b, rej.ViolatedPolicies)
	b = append(b, `,"error":`...)
	b = appendJSONString(b, rej.Error)
	b = append(b, `,"rule":`...)
	b = appendJSONString(b, rej.Rule)
	b = append(b, `,"rules":`...)
	b = appendJSONStrings(b, rej.Rules)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, rej.Limit, 10)
	b = append(b, `,"window":`...)
	b = appendJSONString(b, rej.Window)
	b = append(b, `,"window_seconds":`...)
	b = appendJSONFloat(b, rej.WindowSeconds)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, rej.Remaining, 10)
	b = append(b, `,"retry_after":`...)
	b = strconv.AppendInt(b, rej.RetryAfter, 10)
	if rej.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, string(rej.Reason))
	}
	if rej.Message != "" {
		b = append(b, `,"message":`...)
		b = appendJSONString(b, rej.Message)
	}
	return append(b, "}\n"...)
}

// appendJSONStrings appends ss as a JSON array, null when nil.
func appendJSONStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form only for very
// large or small magnitudes. NaN and infinities, which JSON cannot hold,
// become 0.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 becomes 1e-7, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONString appends s as a JSON string with encoding/json's
// escapes: control characters, '"' and '\', the HTML characters <, > and
// &, U+2028 and U+2029; bytes that are not UTF-8 become U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// writeRejection answers 429 with rej as an RFC 9457 problem body.
func writeRejection(w http.ResponseWriter, rej *Rejection) {
	var stack [512]byte
	w.Header().Set("Content-Type", "application/problem+json")
	writeBody(w, http.StatusTooManyRequests, rej.appendJSON(stack[:0]))
}

// writeError answers code with the JSON body {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	b := append(appendJSONString([]byte(`{"error":`), msg), "}\n"...)
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	writeBody(w, code, b)
}

// writeBody answers code with body, which no cache may keep.
func writeBody(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// decisionRejection describes one limiter's rejection d for a 429 body.
func decisionRejection(name string, w time.Duration, d algorithm.Decision) Rejection {
	rules := []string{name}
	return Rejection{
		Type:             ProblemQuotaExceeded,
		Title:            problemTitle,
		Error:            problemError,
		ViolatedPolicies: rules,
		Rule:             name,
		Rules:            rules,
		Limit:            d.Limit,
		Window:           window.Format(w),
		WindowSeconds:    w.Seconds(),
		Remaining:        d.Remaining,
		RetryAfter:       ratelimitheader.RetryAfterSeconds(d.RetryAfter),
		Reason:           d.Reason,
		Message:          d.Reason.Message(),
	}
}

// The title and error of every 429 body.
const (
	problemTitle = "Request cannot be satisfied as assigned quota has been exceeded"
	problemError = "rate limit exceeded"
)
