package rules

import (
	"fmt"
	"net/netip"
	"strings"
)

// matchKind is how a condition compares an entry's value.
type matchKind uint8

const (
	matchAny    matchKind = iota // the entry is present, any value
	matchExact                   // the value equals s
	matchPrefix                  // the value starts with s
	matchGlob                    // the value matches s, where * matches any run of bytes
	matchOneOf                   // the value matches one of alts
	matchCIDR                    // the value is an IP address inside prefix
)

// matcher compares one entry value.
type matcher struct {
	kind  matchKind
	s     string
	parts []string // glob: s split at '*'
	alts  []matcher
	cidr  netip.Prefix
}

func newGlob(s string) matcher {
	return matcher{kind: matchGlob, s: s, parts: strings.Split(s, "*")}
}

// match reports whether v satisfies m.
func (m *matcher) match(v string) bool {
	switch m.kind {
	case matchAny:
		return true
	case matchExact:
		return v == m.s
	case matchPrefix:
		return strings.HasPrefix(v, m.s)
	case matchGlob:
		return globMatch(m.parts, v)
	case matchOneOf:
		for i := range m.alts {
			if m.alts[i].match(v) {
				return true
			}
		}
	case matchCIDR:
		a, err := netip.ParseAddr(v)
		return err == nil && m.cidr.Contains(a.Unmap())
	}
	return false
}

// globMatch matches v against a pattern already split at each '*': the first
// part must be a prefix, the last a suffix, and the middle ones appear in
// order. It runs in linear time.
func globMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return v == parts[0]
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}

func (m *matcher) String() string {
	switch m.kind {
	case matchAny:
		return "any"
	case matchExact:
		return fmt.Sprintf("= %s", m.s)
	case matchPrefix:
		return fmt.Sprintf("prefix %s", m.s)
	case matchGlob:
		return fmt.Sprintf("like %s", m.s)
	case matchCIDR:
		return fmt.Sprintf("in %s", m.cidr)
	case matchOneOf:
		s := make([]string, len(m.alts))
		for i := range m.alts {
			s[i] = m.alts[i].String()
		}
		return "one of (" + strings.Join(s, ", ") + ")"
	}
	return "?"
}

// condition requires an entry with key whose value satisfies m.
type condition struct {
	key string
	m   matcher
}

// conditions are all required (and).
type conditions []condition

// match reports whether every condition holds for d.
func (cs conditions) match(d Descriptor) bool {
	for i := range cs {
		v, ok := d.Get(cs[i].key)
		if !ok || !cs[i].m.match(v) {
			return false
		}
	}
	return true
}

func (cs conditions) String() string {
	if len(cs) == 0 {
		return "every request"
	}
	s := make([]string, len(cs))
	for i := range cs {
		s[i] = cs[i].key + " " + cs[i].m.String()
	}
	return strings.Join(s, ", ")
}

// find returns the condition on key, if any.
func (cs conditions) find(key string) *condition {
	for i := range cs {
		if cs[i].key == key {
			return &cs[i]
		}
	}
	return nil
}
