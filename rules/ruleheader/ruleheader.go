// Package ruleheader writes the rate-limit response header fields
// (Retry-After, X-RateLimit-*, RateLimit, RateLimit-Policy; package
// ratelimitheader, and RateLimit-Warning for soft limits) that describe a rule engine's result, for every front
// end of the rule engine: the HTTP middleware, the JSON API and the Envoy
// Rate Limit Service.
package ruleheader

import (
	"net/http"
	"strings"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/ratelimitheader"
	"github.com/floodgate-dev/floodgate/rules"
)

// Fields returns the rate-limit header fields that describe res, as
// ratelimitheader.Fields writes them: the X-RateLimit fields for the
// tightest rule, one RateLimit-Policy and RateLimit member per rule that
// applied, and Retry-After (the longest wait of the rules that rejected)
// when res rejects.
//
// Shadow and unlimited rules are left out: they never reject, and a client
// should not pace itself by them. A rule that applied to several descriptors
// is described once, by its most restrictive status.
func Fields(res rules.Result) []ratelimitheader.Field {
	var idx [8]int
	var lims [8]ratelimitheader.Limit
	fields := ratelimitheader.Fields(outcome(res, idx[:0], lims[:0]))
	if w := warnings(res); w != "" {
		fields = append(fields, ratelimitheader.Field{Name: Warning, Value: w})
	}
	return fields
}

// Set sets the fields Fields returns on h, replacing any values they had,
// and removes a RateLimit-Warning field when no rule is in warning.
func Set(h http.Header, res rules.Result) {
	var idx [8]int
	var lims [8]ratelimitheader.Limit
	ratelimitheader.Set(h, outcome(res, idx[:0], lims[:0]))
	SetWarning(h, res)
}

// SetWarning sets only the Warning field for res on h, or removes it when
// no rule is in warning: for answers that are not decisions (a charge),
// which carry no rate-limit fields.
func SetWarning(h http.Header, res rules.Result) {
	if w := warnings(res); w != "" {
		h[canonicalWarning] = []string{w}
	} else {
		delete(h, canonicalWarning)
	}
}

// Warning is the header field that names the rules in warning (a rule's
// warn_at level reached), comma-separated, each once: a soft limit crossed
// before the hard one rejects. It is left out when no rule is in warning.
const Warning = "RateLimit-Warning"

var canonicalWarning = http.CanonicalHeaderKey(Warning)

// warnings returns the value of the Warning field for res: the rules in
// warning that are neither shadow nor unlimited, in rule order, each once;
// empty for none.
func warnings(res rules.Result) string {
	var b strings.Builder
	for i := range res.Statuses {
		s := &res.Statuses[i]
		if !s.Warning || s.Shadow || s.Unlimited {
			continue
		}
		dup := false
		for j := range i {
			if o := &res.Statuses[j]; o.Warning && !o.Shadow && o.Rule == s.Rule {
				dup = true
				break
			}
		}
		if !dup {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(s.Rule)
		}
	}
	return b.String()
}

// outcome is what the header fields say of res, built in idx (the indexes
// of the statuses described) and lims, which the callers keep off the heap
// for up to eight rules.
func outcome(res rules.Result, idx []int, lims []ratelimitheader.Limit) ratelimitheader.Outcome {
	idx = visible(res, idx)
	if len(idx) == 0 {
		return ratelimitheader.Outcome{}
	}
	for _, i := range idx {
		lims = append(lims, limit(&res.Statuses[i]))
	}
	return ratelimitheader.Outcome{
		Limits:     lims,
		Tightest:   limit(&res.Statuses[tightest(res, idx)]),
		Rejected:   !res.Allowed,
		RetryAfter: res.RetryAfter(),
	}
}

// limit describes one rule's status; a concurrency rule has no window.
func limit(s *rules.Status) ratelimitheader.Limit {
	l := ratelimitheader.Limit{Name: s.Rule, Limit: s.Limit, Window: s.Window, Decision: s.Decision}
	if s.Algorithm == algorithm.Concurrency {
		l.Window = 0
	}
	return l
}

// visible appends to dst the indexes in res.Statuses of the statuses the
// headers describe: limited, not shadow, one per rule (the most
// restrictive), in rule order.
func visible(res rules.Result, dst []int) []int {
	out := dst
	for i := range res.Statuses {
		s := &res.Statuses[i]
		if s.Shadow || s.Unlimited {
			continue
		}
		dup := false
		for j, k := range out {
			if o := &res.Statuses[k]; o.Rule == s.Rule {
				dup = true
				if s.Tighter(o) {
					out[j] = i
				}
				break
			}
		}
		if !dup {
			out = append(out, i)
		}
	}
	return out
}

// tightest returns the index of the status the X-RateLimit fields
// describe: the engine's choice when it is visible, else the tightest of
// the visible ones, idx.
func tightest(res rules.Result, idx []int) int {
	if t := res.Tightest; t >= 0 && t < len(res.Statuses) && !res.Statuses[t].Shadow && !res.Statuses[t].Unlimited {
		return t
	}
	best := idx[0]
	for _, i := range idx[1:] {
		if res.Statuses[i].Tighter(&res.Statuses[best]) {
			best = i
		}
	}
	return best
}
