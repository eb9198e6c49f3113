package metrics

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// UnmatchedStats is the number of requests of one domain label no rule
// applied to.
type UnmatchedStats struct {
	// Domain is the rule set's domain, or "other" for domains no rule set
	// has.
	Domain string `json:"domain"`
	// Reason says why no rule applied: "rules" (the domain's rules match
	// none of the descriptors) or "domain" (no rule set has the domain).
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// unmatchedCounts counts unmatched requests by domain label. Labels are
// bounded: rule-set domains, and "other" for the rest.
type unmatchedCounts struct {
	vec    *prometheus.CounterVec
	counts sync.Map // label -> *unmatchedCount
}

type unmatchedCount struct {
	n      atomic.Uint64
	reason string
	c      prometheus.Counter
}

func newUnmatchedCounts() *unmatchedCounts {
	return &unmatchedCounts{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_unmatched_requests_total",
		Help: "Requests no rule applied to, so not limited, by domain: the rule set's domain they were checked in, or \"other\" when no rule set has their domain.",
	}, []string{"domain"})}
}

// otherDomain is the domain label of unmatched requests whose domain no
// rule set has, so that the number of labels stays bounded by the rule
// files and not by what clients send.
const otherDomain = "other"

// domainLabel is the domain label res is counted under: the rule set's
// domain it was checked in, or otherDomain.
func domainLabel(res rules.Result) string {
	if res.Domain == "" {
		return otherDomain
	}
	return res.Domain
}

func (u *unmatchedCounts) add(res rules.Result) {
	label := domainLabel(res)
	if res.Unmatched == "" {
		label, res.Unmatched = otherDomain, rules.UnmatchedDomain
	}
	v, ok := u.counts.Load(label)
	if !ok {
		v, _ = u.counts.LoadOrStore(label, &unmatchedCount{reason: res.Unmatched, c: u.vec.WithLabelValues(label)})
	}
	c := v.(*unmatchedCount)
	c.n.Add(1)
	c.c.Inc()
}

// known makes the counters of labels at 0, without listing them in the
// status page's snapshot until they count a request.
func (u *unmatchedCounts) known(labels []string) {
	for _, l := range labels {
		u.vec.WithLabelValues(l)
	}
}

func (u *unmatchedCounts) snapshot() []UnmatchedStats {
	out := []UnmatchedStats{}
	u.counts.Range(func(k, v any) bool {
		c := v.(*unmatchedCount)
		out = append(out, UnmatchedStats{Domain: k.(string), Reason: c.reason, Count: c.n.Load()})
		return true
	})
	slices.SortFunc(out, func(a, b UnmatchedStats) int { return strings.Compare(a.Domain, b.Domain) })
	return out
}
