package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Counter keys have the form
//
//	domain|rule|key=value|key=value
//
// where each part has '\', '|' and '=' escaped with a backslash, so no
// choice of values can make two different (domain, rule, entries) tuples
// share a key: the unescaped separators mark the boundaries exactly. A value
// longer than maxValueLen is written as '=' and its SHA-256 digest in hex,
// which keeps keys short whatever a client sends.

// keyBuilder appends escaped key parts.
type keyBuilder struct{ b strings.Builder }

func (k *keyBuilder) part(s string) {
	if k.b.Len() > 0 {
		k.b.WriteByte('|')
	}
	k.escaped(s)
}

func (k *keyBuilder) entry(key, value string) {
	k.b.WriteByte('|')
	k.escaped(key)
	k.b.WriteByte('=')
	if len(value) > maxValueLen {
		// A long value is counted by its SHA-256 digest, marked by a second
		// unescaped '=' that no escaped value can begin with.
		sum := sha256.Sum256([]byte(value))
		k.b.WriteByte('=')
		k.b.WriteString(hex.EncodeToString(sum[:]))
		return
	}
	k.escaped(value)
}

func (k *keyBuilder) escaped(s string) {
	plain := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\\' || c == '|' || c == '=' {
			plain = false
			break
		}
	}
	if plain {
		k.b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\', '|', '=':
			k.b.WriteByte('\\')
			k.b.WriteByte(c)
		default:
			k.b.WriteByte(c)
		}
	}
}

func (k *keyBuilder) String() string { return k.b.String() }

// ruleKey builds the counter key of rule r for descriptor d: the domain, the
// rule's id and the values of the entries it counts by. It reports false if
// d lacks one of them.
func ruleKey(domain string, r *rule, d Descriptor) (string, bool) {
	var k keyBuilder
	k.b.Grow(len(domain) + len(r.id) + 32)
	k.part(domain)
	k.part(r.id)
	if r.countAll {
		for i, e := range d {
			if i < len(r.shared) && r.shared[i] != "" {
				k.entry(e.Key, r.shared[i]) // every value the pattern matches shares one counter
				continue
			}
			k.entry(e.Key, e.Value)
		}
		return k.String(), true
	}
	for _, key := range r.countBy {
		v, ok := d.Get(key)
		if !ok {
			return "", false
		}
		k.entry(key, v)
	}
	return k.String(), true
}
