package rules

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// This file reads envoyproxy/ratelimit's configuration format:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: remote_address
//	    value: 50.0.0.5
//	    rate_limit: {unit: second, requests_per_unit: 0}
//
// and matches the way that service does: a request descriptor's entries are
// walked down the nested descriptors in order; at each level an entry whose
// key and value both match is preferred, then a wildcard value ("foo*"),
// then the key alone; the limit is the one on the node reached by the last
// entry. A '*' in a value matches any run of bytes, at any position
// ("/api/*/action", "foo*bar*baz"); wildcards are tried in file order.
// Each request descriptor gets at most one limit, counted per value of
// every entry, except that an entry matched by a share_threshold wildcard
// counts by the pattern, so every value it matches shares one counter;
// replaces drops named limits when the replacing one also applies. A
// quota_mode limit rejects a request only when every quota_mode limit that
// applies to it is over. Limits are enforced with Floodgate's default
// algorithm. detailed_metric, value_to_metric and metadata are read and
// checked; they change no decision (Floodgate's metrics are per rule, never
// per value).

var (
	envoyTopFields  = []string{"domain", "descriptors"}
	envoyDescFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
		"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
	envoyLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}
	envoyUnits       = map[string]time.Duration{
		"second": time.Second,
		"minute": time.Minute,
		"hour":   time.Hour,
		"day":    24 * time.Hour,
		"week":   7 * 24 * time.Hour,
		"month":  30 * 24 * time.Hour,
		"year":   365 * 24 * time.Hour,
	}
)

// unitWindow returns the window of an envoyproxy/ratelimit unit name
// (second, minute, hour, day, week, month, year; any case): a month is 30
// days and a year 365. It reports false for any other name.
func unitWindow(unit string) (time.Duration, bool) {
	w, ok := envoyUnits[strings.ToLower(unit)]
	return w, ok
}

// envoyNode is one level of nested descriptors.
type envoyNode struct {
	exact    map[Entry]*envoyNode
	keyOnly  map[string]*envoyNode
	wildcard []*envoyNode // in file order
	children int

	key  string  // wildcard nodes: the key
	glob matcher // wildcard nodes: the value pattern
	rule *rule   // nil: no rate_limit here
}

func newEnvoyNode() *envoyNode {
	return &envoyNode{exact: map[Entry]*envoyNode{}, keyOnly: map[string]*envoyNode{}}
}

// maxEnvoyDepth bounds the nesting of descriptors.
const maxEnvoyDepth = maxDescriptorEntries

func parseEnvoy(d *decoder, doc *yaml.Node) *Set {
	s := &Set{format: formatEnvoy, tree: newEnvoyNode()}
	f := d.fields(doc, "the file", envoyTopFields...)
	if v, ok := f["domain"]; ok {
		if dom, ok := d.str(v.value, "domain"); ok {
			if dom == "" {
				d.errorf(v.value, "domain is empty; name the domain Envoy sends, such as domain: edge")
			}
			s.domain = dom
		}
	} else {
		d.errorf(doc, "domain is missing; add the domain Envoy sends, such as domain: edge")
	}
	if v, ok := f["descriptors"]; ok {
		d.envoyLevel(s, s.tree, v.value, nil, nil, 0)
	}
	if len(s.rules) > 0 {
		names := map[string]bool{}
		for _, r := range s.rules {
			if r.limitName != "" {
				names[r.limitName] = true
			}
		}
		for _, r := range s.rules {
			for _, rep := range r.replaces {
				if !names[rep] {
					d.errorf(nil, "rule on line %d replaces %q, but no rate_limit has that name; fix the name or remove the replaces entry", r.line, rep)
				}
			}
		}
	}
	return s
}

// envoyLevel parses a descriptors list into node; path holds the conditions
// of the enclosing levels and shared their share_threshold patterns (one
// per level, empty where the level does not share).
func (d *decoder) envoyLevel(s *Set, node *envoyNode, n *yaml.Node, path conditions, shared []string, depth int) {
	if isNull(n) {
		return // descriptors: with nothing under it, as the reference allows
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "descriptors must be a list, each item starting with - key: ...; got %s", kindName(n))
		return
	}
	if depth >= maxEnvoyDepth {
		d.errorf(n, "descriptors are nested more than %d deep", maxEnvoyDepth)
		return
	}
	firstLine := map[Entry]int{}
	for _, item := range n.Content {
		f := d.fields(item, "descriptor", envoyDescFields...)
		if item.Kind != yaml.MappingNode {
			continue
		}
		kv, ok := f["key"]
		if !ok {
			d.errorf(item, "descriptor has no key; every descriptor needs key: (and optionally value:)")
			continue
		}
		key, ok := d.entryKey(kv.value, "descriptor key")
		if !ok {
			continue
		}
		value := ""
		if vv, ok := f["value"]; ok {
			value, ok = d.str(vv.value, "descriptor value")
			if !ok {
				continue
			}
		}
		ent := Entry{key, value}
		if line, dup := firstLine[ent]; dup {
			d.errorf(item, "descriptor %s appears twice at this level (first on line %d); merge them", describeEntry(ent), line)
			continue
		}
		firstLine[ent] = item.Line

		child := newEnvoyNode()
		cond := condition{key: key, m: matcher{kind: matchAny}}
		switch {
		case value == "":
			node.keyOnly[key] = child
		case strings.Contains(value, "*"):
			child.key, child.glob = key, newGlob(value)
			if strings.Count(value, "*") == 1 && strings.HasSuffix(value, "*") {
				child.glob = matcher{kind: matchPrefix, s: strings.TrimSuffix(value, "*")}
			}
			node.wildcard = append(node.wildcard, child)
			cond.m = child.glob
		default:
			node.exact[ent] = child
			cond.m = matcher{kind: matchExact, s: value}
		}
		node.children++
		here := append(append(conditions(nil), path...), cond)

		sharedHere := d.envoyLimits(s, child, f, ent, here, shared)
		if v, ok := f["descriptors"]; ok {
			d.envoyLevel(s, child, v.value, here, sharedHere, depth+1)
		}
	}
}

// envoyLimits reads one descriptor's flags and rate_limit into child, a
// descriptor ent at path here (shared: the share_threshold patterns above
// it), and returns the patterns for the levels below it.
func (d *decoder) envoyLimits(s *Set, child *envoyNode, f map[string]field, ent Entry, here conditions, shared []string) []string {
	value := ent.Value
	flags := map[string]bool{}
	for _, name := range []string{"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"} {
		if v, ok := f[name]; ok {
			flags[name], _ = d.boolean(v.value, name)
		}
	}
	share := ""
	if flags["share_threshold"] {
		if !strings.Contains(value, "*") {
			d.errorf(f["share_threshold"].key, "share_threshold needs a wildcard value (containing '*') to share; %s has none", describeEntry(ent))
		}
		share = value
	}
	sharedHere := append(append([]string(nil), shared...), share)
	if v, ok := f["metadata"]; ok && !isNull(v.value) && v.value.Kind != yaml.MappingNode {
		d.errorf(v.value, "metadata must be a mapping of name: value; got %s", kindName(v.value))
	}
	if v, ok := f["rate_limit"]; ok {
		if len(s.rules) >= maxRules {
			d.errorf(v.key, "more than %d rate limits; the most is %d", maxRules, maxRules)
		} else if r := d.envoyLimit(v.value, here, len(s.rules)); r != nil {
			r.shadow = flags["shadow_mode"]
			r.quota = flags["quota_mode"]
			for _, p := range sharedHere {
				if p != "" {
					r.shared = sharedHere
					break
				}
			}
			child.rule = r
			s.rules = append(s.rules, r)
		}
	} else {
		for _, name := range []string{"shadow_mode", "quota_mode"} {
			if flags[name] {
				d.errorf(f[name].key, "%s without a rate_limit on the same descriptor does nothing; move it next to the rate_limit", name)
			}
		}
	}
	return sharedHere
}

func describeEntry(e Entry) string {
	if e.Value == "" {
		return fmt.Sprintf("key %q", e.Key)
	}
	return fmt.Sprintf("%q=%q", e.Key, e.Value)
}

// envoyID names a rate limit by its path of descriptors, as
// key=value>key2>key3=v*, escaping the separators.
func envoyID(path conditions) string {
	var b strings.Builder
	esc := func(s string) {
		for i := 0; i < len(s); i++ {
			switch c := s[i]; c {
			case '\\', '>', '=':
				b.WriteByte('\\')
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
	}
	for i, c := range path {
		if i > 0 {
			b.WriteByte('>')
		}
		esc(c.key)
		switch c.m.kind {
		case matchExact:
			b.WriteByte('=')
			esc(c.m.s)
		case matchPrefix:
			b.WriteByte('=')
			esc(c.m.s)
			b.WriteByte('*')
		case matchGlob:
			b.WriteByte('=')
			esc(c.m.s)
		}
	}
	return b.String()
}

// envoyLimit parses a rate_limit block.
func (d *decoder) envoyLimit(n *yaml.Node, path conditions, index int) *rule {
	before := len(d.errs)
	f := d.fields(n, "rate_limit", envoyLimitFields...)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	r := &rule{index: index, line: n.Line, match: path, countAll: true, cost: cost{}}
	r.id = envoyID(path)
	r.name = r.id
	if v, ok := f["name"]; ok {
		if name, ok := d.str(v.value, "rate_limit name"); ok && name != "" {
			r.name, r.limitName = name, name
		}
	}
	if v, ok := f["replaces"]; ok {
		r.replaces = d.envoyReplaces(v.value, r.limitName)
	}
	unlimited := false
	if v, ok := f["unlimited"]; ok {
		unlimited, _ = d.boolean(v.value, "unlimited")
	}
	uv, hasUnit := f["unit"]
	rv, hasRPU := f["requests_per_unit"]
	cfg := algorithm.Config{Algorithm: algorithm.BoundedLog}
	switch {
	case unlimited && (hasUnit || hasRPU):
		d.errorf(n, "an unlimited rate_limit takes no unit or requests_per_unit; remove them or unlimited: true")
	case unlimited:
		r.base.unlimited = true
	default:
		if hasUnit {
			if u, ok := d.str(uv.value, "unit"); ok {
				w, known := unitWindow(u)
				if !known {
					d.errorf(uv.value, "unit %q is not a unit; use second, minute, hour, day, week, month or year", clip(u))
				}
				cfg.Window = w
			}
		} else {
			d.errorf(n, "rate_limit has no unit; add unit: second, minute, hour or day")
		}
		if hasRPU {
			cfg.Limit, _ = d.integer(rv.value, "requests_per_unit", 0, maxLimit)
		} else {
			d.errorf(n, "rate_limit has no requests_per_unit; add the number of requests allowed per unit (0 blocks every request)")
		}
	}
	if len(d.errs) > before {
		return nil
	}
	if !r.base.unlimited {
		cfg.Counter = r.id // a reload that changes the limit keeps the count
		l, err := newLimit(cfg)
		if err != nil {
			d.errorf(n, "rate_limit: %v", err)
			return nil
		}
		r.base = l
	}
	return r
}

// envoyReplaces reads a rate_limit's replaces list: the names of the
// limits it replaces, never its own.
func (d *decoder) envoyReplaces(n *yaml.Node, self string) []string {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "replaces must be a list of - name: ...; got %s", kindName(n))
		return nil
	}
	var names []string
	for _, rn := range n.Content {
		rf := d.fields(rn, "replaces entry", "name")
		nv, ok := rf["name"]
		if !ok {
			if rn.Kind == yaml.MappingNode {
				d.errorf(rn, "replaces entry has no name; write - name: the-limit-it-replaces")
			}
			continue
		}
		name, ok := d.str(nv.value, "replaces name")
		switch {
		case !ok:
		case name == "":
			d.errorf(nv.value, "replaces name is empty; name the rate_limit it replaces")
		case name == self:
			d.errorf(nv.value, "a rate_limit cannot replace itself (%q); name another one", name)
		default:
			names = append(names, name)
		}
	}
	return names
}

// walk finds the rule for one request descriptor, or nil.
func (t *envoyNode) walk(desc Descriptor) *rule {
	node := t
	var found *rule
	for i, e := range desc {
		next := node.exact[e]
		if next == nil {
			for _, w := range node.wildcard {
				if w.key == e.Key && w.glob.match(e.Value) {
					next = w
					break
				}
			}
		}
		if next == nil {
			next = node.keyOnly[e.Key]
		}
		if next == nil {
			break
		}
		if next.rule != nil && i == len(desc)-1 {
			found = next.rule
		}
		if next.children == 0 {
			break
		}
		node = next
	}
	return found
}

// resolveEnvoy applies envoyproxy/ratelimit matching to every descriptor,
// then drops limits replaced by another that applies.
func (s *Set) resolveEnvoy(req Request, hits int64, out []applied) ([]applied, error) {
	start := len(out)
	for i, d := range req.Descriptors {
		if overridden(req, i) {
			continue
		}
		if r := s.tree.walk(d); r != nil {
			out = s.apply(out, r, i, d, hits)
		}
	}
	out, err := s.applyOverrides(req, hits, out)
	if err != nil {
		return out, err
	}
	mine := out[start:]
	var replaced []string
	for _, a := range mine {
		replaced = append(replaced, a.r.replaces...)
	}
	if len(replaced) > 0 {
		kept := mine[:0]
		for _, a := range mine {
			if a.r.limitName == "" || !contains(replaced, a.r.limitName) {
				kept = append(kept, a)
			}
		}
		out = out[:start+len(kept)]
		mine = kept
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].r.index < mine[j].r.index })
	return out, nil
}
