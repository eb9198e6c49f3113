package envoycompat

import (
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/types/known/structpb"
)

// File is one rule file to load: the name envoyproxy/ratelimit gives it
// (its runtime key, such as config.basic) and its text.
type File struct {
	Name string
	Text []byte
	// root, when set, is the file already read (a RateLimitConfig pushed
	// over xDS, whose fields need no YAML): Text is then ignored.
	root *yamlRoot
}

// yamlRoot, yamlDescriptor and yamlLimit are the rule file's fields.
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlLimit       `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       map[string]any   `yaml:"metadata"`
}

type yamlLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// validKeys are the field names a rule file may use, at any level, as
// envoyproxy/ratelimit checks them.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
}

// limit is one rate_limit of the rule files, or a request's override.
type limit struct {
	perUnit   uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	divider   int64 // the unit in seconds
	unlimited bool
	shadow    bool
	quota     bool
	name      string
	replaces  []string
	metadata  *structpb.Struct
	// fullKey is the limit's path in the rule files (domain.key_value.key),
	// the reference's name of it in /rlconfig.
	fullKey string
	// detailed is detailed_metric; the reference then reports no metadata.
	detailed bool
	// answer is the current_limit of its statuses.
	answer *rlsv3.RateLimitResponse_RateLimit
}

// wildcard is a descriptor whose key_value holds a '*', split at each '*'.
type wildcard struct {
	key   string
	parts []string
}

// node is one level of descriptors.
type node struct {
	children  map[string]*node // by key, or key_value
	limit     *limit
	wildcards []wildcard // the children with a '*', in file order
	// share is the share_threshold pattern of this node (its key_value),
	// empty when it does not share.
	share string
	// valueToMetric is value_to_metric.
	valueToMetric bool
}

// Config is a loaded set of rule files: one descriptor tree per domain.
type Config struct {
	domains map[string]*node
	// Literal lists the descriptors (file: domain.key_value) whose value
	// holds a '*' that is not a wildcard (Wildcards trailing), so that the
	// server can say so.
	Literal []string
}

// Wildcards says which '*' in a descriptor value is a wildcard.
type Wildcards int

const (
	// WildcardsTrailing: only a value ending in '*' is a wildcard, and it
	// matches by prefix; any other '*' is a literal character, as in
	// envoyproxy/ratelimit before envoyproxy/ratelimit#1085 (the version
	// the Go module proxy serves, which the differential test runs), for a
	// fleet that still runs such a version beside this one.
	WildcardsTrailing Wildcards = iota
	// WildcardsAnywhere: every '*' matches any run of bytes
	// (/api/*/action, foo*bar*baz), as the current envoyproxy/ratelimit
	// does.
	WildcardsAnywhere
)

// configError is a rule file that does not load, with the file's name.
type configError struct{ file, msg string }

func (e *configError) Error() string { return e.file + ": " + e.msg }

// LoadConfig loads files as envoyproxy/ratelimit does: every field checked
// against the fields it knows, each file's descriptors into its domain's
// tree. With merge (MERGE_DOMAIN_CONFIG) files with the same domain are
// merged; without it that is an error.
func LoadConfig(files []File, merge bool, wild Wildcards) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		if root.Domain == "" {
			return nil, &configError{f.Name, "config file cannot have empty domain"}
		}
		dom, ok := c.domains[root.Domain]
		if ok && !merge {
			return nil, &configError{f.Name, fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
		}
		if !ok {
			dom = &node{children: map[string]*node{}}
		}
		if err := dom.load(c, wild, f.Name, root.Domain+".", root.Descriptors); err != nil {
			return nil, err
		}
		c.domains[root.Domain] = dom
	}
	return c, nil
}

// Empty reports whether no domain is loaded.
func (c *Config) Empty() bool { return len(c.domains) == 0 }

// parseFile reads one file as the reference does, with the YAML library
// it uses (YAML 1.1: yes, on and y are booleans, a timestamp is read as a
// string): the field names and the kinds of values checked first, then the
// fields decoded.
func parseFile(f File) (*yamlRoot, error) {
	if f.root != nil {
		return f.root, nil
	}
	raw := map[any]any{}
	if err := yaml.Unmarshal(f.Text, &raw); err != nil {
		return nil, &configError{f.Name, "error loading config file: " + err.Error()}
	}
	if err := validateKeys(raw); err != nil {
		return nil, &configError{f.Name, err.Error()}
	}
	root := &yamlRoot{}
	if err := yaml.Unmarshal(f.Text, root); err != nil {
		return nil, &configError{f.Name, "error loading config file: " + err.Error()}
	}
	return root, nil
}

// validateKeys checks a mapping's field names at every level, leaving
// metadata's content alone, and the kinds of its values, as the reference
// does.
func validateKeys(m map[any]any) error {
	for k, v := range m {
		name, ok := k.(string)
		if !ok {
			return fmt.Errorf("config error, key is not of type string: %v", k)
		}
		if !validKeys[name] {
			return fmt.Errorf("config error, unknown key '%s'", name)
		}
		if name == "metadata" {
			continue
		}
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				em, ok := e.(map[any]any)
				if !ok {
					return fmt.Errorf("config error, yaml file contains list of type other than map: %v", e)
				}
				if err := validateKeys(em); err != nil {
					return err
				}
			}
		case map[any]any:
			if err := validateKeys(v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return fmt.Errorf("error checking config")
		}
	}
	return nil
}

// parseMetadata is a descriptor's metadata as the reference reads it: the
// keys of nested mappings written as text (%v), then made a protobuf
// Struct (nil when empty).
func parseMetadata(m map[string]any) (*structpb.Struct, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = stringKeys(v)
	}
	return structpb.NewStruct(out)
}

// stringKeys converts the mappings in v (at any depth) to mappings with
// text keys.
func stringKeys(v any) any {
	switch v := v.(type) {
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprintf("%v", k)] = stringKeys(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = stringKeys(e)
		}
		return out
	}
	return v
}

// unitByName maps a unit's name in upper case to the unit.
func unitByName(u string) (rlsv3.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(u)]
	if !ok || v == int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
		return 0, false
	}
	return rlsv3.RateLimitResponse_RateLimit_Unit(v), true
}

// unitSeconds is a unit's length in seconds (a month is 30 days, a year
// 365), or 0 for UNKNOWN and values outside the enum.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

func newLimit(perUnit uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string) *limit {
	return &limit{perUnit: perUnit, unit: unit, divider: unitSeconds(unit), name: name,
		answer: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: unit, Name: name}}
}

// load adds descriptors to n; parent is the path of n's key, for errors.
func (n *node) load(c *Config, wild Wildcards, file, parent string, descs []yamlDescriptor) error {
	for _, d := range descs {
		if d.Key == "" {
			return &configError{file, "descriptor has empty key"}
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		path := parent + final
		if _, dup := n.children[final]; dup {
			return &configError{file, fmt.Sprintf("duplicate descriptor composite key '%s'", path)}
		}
		child := &node{children: map[string]*node{}, valueToMetric: d.ValueToMetric}
		if rl := d.RateLimit; rl != nil {
			unit, valid := unitByName(rl.Unit)
			switch {
			case rl.Unlimited && valid:
				return &configError{file, "should not specify rate limit unit when unlimited"}
			case !rl.Unlimited && !valid:
				return &configError{file, fmt.Sprintf("invalid rate limit unit '%s'", rl.Unit)}
			}
			l := newLimit(rl.RequestsPerUnit, unit, rl.Name)
			l.unlimited, l.shadow, l.quota, l.detailed = rl.Unlimited, d.ShadowMode, d.QuotaMode, d.DetailedMetric
			l.fullKey = path
			for _, r := range rl.Replaces {
				if r.Name == "" {
					return &configError{file, "should not have an empty replaces entry"}
				}
				if r.Name == rl.Name {
					return &configError{file, "replaces should not contain name of same descriptor"}
				}
				l.replaces = append(l.replaces, r.Name)
			}
			child.limit = l
		}
		isWild := strings.Contains(final, "*")
		parts := strings.Split(final, "*")
		if wild == WildcardsTrailing {
			isWild = strings.HasSuffix(final, "*")
			parts = []string{strings.TrimSuffix(final, "*"), ""}
			if !isWild && strings.Contains(final, "*") {
				c.Literal = append(c.Literal, file+": "+path)
			}
		}
		if d.ShareThreshold {
			if !isWild {
				if wild == WildcardsTrailing {
					return &configError{file, fmt.Sprintf("share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", final)}
				}
				return &configError{file, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", final)}
			}
			child.share = final
		}
		if isWild {
			n.wildcards = append(n.wildcards, wildcard{key: final, parts: parts})
		}
		if len(d.Metadata) > 0 {
			md, err := parseMetadata(d.Metadata)
			if err != nil {
				return &configError{file, "error parsing metadata: " + err.Error()}
			}
			if child.limit != nil {
				child.limit.metadata = md
			}
		}
		if err := child.load(c, wild, file, path+".", d.Descriptors); err != nil {
			return err
		}
		n.children[final] = child
	}
	return nil
}

// wildcardMatch reports whether value matches a pattern split at each '*':
// the first part a prefix, the last a suffix, the others in order between.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if len(value) < total {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// match is the limit a descriptor gets, with the share_threshold patterns
// its entries count by (nil when none).
type match struct {
	limit  *limit
	shared []string
	// metadata is the limit's metadata as the reference reports it: none
	// when it renamed the limit's stats (see lookupStats).
	metadata *structpb.Struct
	// stats is the name the reference counts the limit's stats under
	// (domain.key_value.key...), when lookup was asked for it.
	stats string
}

// entry is one key and value of a request descriptor.
type entry struct{ key, value string }

// lookup finds the limit of one descriptor in domain, as envoyproxy/ratelimit
// walks its tree: at each level key_value, then the wildcards in file
// order, then the key alone; the limit is the one on the node the last
// entry reaches.
func (c *Config) lookup(domain string, entries []entry) match {
	return c.lookupStats(domain, entries, false)
}

// lookupStats is lookup, also naming the limit's stats when withStats is
// set: the path of the limit in the rule files, with each entry's value
// where value_to_metric says so, or with every value under detailed_metric
// (the share_threshold pattern in place of a shared value).
func (c *Config) lookupStats(domain string, entries []entry, withStats bool) match {
	dom := c.domains[domain]
	if dom == nil {
		return match{}
	}
	var m match
	var shared []string
	var named strings.Builder // the stats name with value_to_metric's values
	if withStats {
		named.WriteString(domain)
	}
	renamed := false // value_to_metric put a value in the stats key
	// limitHasChildren: the limit's node has descriptors below it; the
	// reference then keeps a detailed_metric limit's metadata.
	limitHasChildren := false
	cur := dom
	for i, e := range entries {
		final := e.key + "_" + e.value
		next := cur.children[final]
		viaWildcard := false
		if next == nil {
			for _, w := range cur.wildcards {
				if wildcardMatch(w.parts, final) {
					next, viaWildcard = cur.children[w.key], true
					break
				}
			}
		}
		if next == nil {
			next = cur.children[e.key]
		}
		if viaWildcard && next != nil && next.share != "" {
			if shared == nil {
				shared = make([]string, len(entries))
			}
			shared[i] = strings.TrimPrefix(next.share, e.key+"_")
		}
		if next != nil && next.valueToMetric && e.value != "" && (viaWildcard && next.share == "" || !viaWildcard && next != cur.children[final]) {
			renamed = true
		}
		if withStats {
			named.WriteByte('.')
			named.WriteString(e.key)
			if v := statsValue(cur, next, e, final, viaWildcard, shared, i); v != "" {
				named.WriteByte('_')
				named.WriteString(v)
			}
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			m.limit = next.limit
			limitHasChildren = len(next.children) > 0
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		cur = next
	}
	if m.limit != nil {
		m.shared = shared
		// The reference makes the limit anew, without its metadata, when
		// it renames its stats: detailed_metric on a node without
		// descriptors below, or value_to_metric otherwise.
		if m.limit.detailed && limitHasChildren || !m.limit.detailed && !renamed {
			m.metadata = m.limit.metadata
		}
		if withStats {
			m.stats = named.String()
			if m.limit.detailed {
				m.stats = detailedStats(domain, entries, shared)
			}
		}
	}
	return m
}

// statsValue is the value entry e adds to its stats name: the matched
// pattern (or the shared pattern) for a wildcard, the value for an exact
// match or with value_to_metric, nothing for a key-only match.
func statsValue(cur, next *node, e entry, final string, viaWildcard bool, shared []string, i int) string {
	switch {
	case next == nil:
		return ""
	case viaWildcard && shared != nil && shared[i] != "":
		return shared[i]
	case viaWildcard && next.valueToMetric:
		return e.value
	case viaWildcard:
		for _, w := range cur.wildcards {
			if cur.children[w.key] == next {
				return strings.TrimPrefix(w.key, e.key+"_")
			}
		}
	case next == cur.children[final]:
		return e.value
	case next.valueToMetric:
		return e.value
	}
	return ""
}

// detailedStats is a detailed_metric limit's stats name: every entry's
// key_value, or key_pattern where the entry is shared.
func detailedStats(domain string, entries []entry, shared []string) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.key)
		switch {
		case shared != nil && shared[i] != "":
			b.WriteString("_" + shared[i])
		case shared != nil:
			if e.value != "" {
				b.WriteString("_" + e.value)
			}
		default:
			b.WriteString("_" + e.value)
		}
	}
	return b.String()
}
