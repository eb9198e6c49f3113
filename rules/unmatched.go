package rules

// Why no rule applied to a request, as Result.Unmatched says.
const (
	// UnmatchedDomain: no rule set has the request's domain (a mistyped
	// domain, or a client configured for another rule file).
	UnmatchedDomain = "domain"
	// UnmatchedRules: the domain exists, but none of its rules matched any
	// of the request's descriptors (or lacked an entry a rule counts by).
	UnmatchedRules = "rules"
)

// unmatched tells why no rule of s applied to a request for domain, and the
// domain it was checked in ("" when no set has it).
func (s *Set) unmatched(domain string) (checkedIn, why string) {
	if domain == "" || domain == s.domain {
		return s.domain, UnmatchedRules
	}
	for _, m := range s.more {
		if m.domain == domain {
			return m.domain, UnmatchedRules
		}
	}
	return "", UnmatchedDomain
}
