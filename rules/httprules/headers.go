package httprules

import (
	"net/http"

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
	var arr [8]rules.Status
	var lims [8]ratelimitheader.Limit
	return ratelimitheader.Fields(outcome(res, arr[:0], lims[:0]))
}

// SetHeaders sets the fields Fields returns on h, replacing any values they
// had.
func SetHeaders(h http.Header, res rules.Result) {
	var arr [8]rules.Status
	var lims [8]ratelimitheader.Limit
	ratelimitheader.Set(h, outcome(res, arr[:0], lims[:0]))
}

// outcome is what the header fields say of res, built in sts and lims
// (kept off the heap by the callers for up to eight rules).
func outcome(res rules.Result, sts []rules.Status, lims []ratelimitheader.Limit) ratelimitheader.Outcome {
	sts = visible(res, sts)
	if len(sts) == 0 {
		return ratelimitheader.Outcome{}
	}
	for i := range sts {
		lims = append(lims, limit(&sts[i]))
	}
	tight := tightest(res, sts)
	return ratelimitheader.Outcome{
		Limits:     lims,
		Tightest:   limit(&tight),
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
				if s.Tighter(&out[j]) {
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
		if s.Tighter(&best) {
			best = s
		}
	}
	return best
}
