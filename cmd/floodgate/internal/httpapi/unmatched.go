package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/ruleheader"
)

// finishCheck adds to a /v1/check answer what the JSON body alone does not
// carry: the rate-limit header fields the middleware sends (RateLimit,
// RateLimit-Policy, X-RateLimit-*, Retry-After when rejected), and, when no
// rule applied, the Unmatched field and a note naming the domains the rules
// have.
func finishCheck(h http.Header, out *CheckResponse, res rules.Result, set *rules.Set) {
	ruleheader.Set(h, res)
	out.Unmatched = res.Unmatched
	switch res.Unmatched {
	case rules.UnmatchedDomain:
		out.Note = fmt.Sprintf("no rule set has this domain; the rules have domain %s: the request was not limited",
			strings.Join(quoteAll(set.Domains()), ", "))
	case rules.UnmatchedRules:
		out.Note = fmt.Sprintf("no rule of domain %q matches these descriptors: the request was not limited (GET /v1/rules lists the rules)",
			res.Domain)
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
