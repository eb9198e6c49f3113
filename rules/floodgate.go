package rules

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

var (
	validName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
	validDomain = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
)

// Fields of Floodgate's format.
var (
	topFields  = []string{"domain", "shadow", "prices", "rules"}
	ruleFields = []string{"name", "description", "match", "count_by", "limit", "window", "calendar", "carry_over",
		"unlimited", "algorithm", "slices", "capacity", "rate", "burst", "tolerance", "max_delay",
		"overrides", "cost", "shadow", "failure", "charge_after_response", "leases", "warn_at", "hash_tag"}
	leaseFields    = []string{"ttl", "holders"}
	overrideFields = []string{"match", "limit", "window", "unlimited"}
	calendarFields = []string{"period", "zone", "start"}
	costFields     = []string{"from", "default", "usage"}
	matchFields    = []string{"exact", "prefix", "glob", "any", "cidr"}
)

// paramAlgorithms says which algorithms use each parameter field.
var paramAlgorithms = map[string][]algorithm.Name{
	"slices":    {algorithm.SlidingWindow},
	"capacity":  {algorithm.TokenBucket, algorithm.LeakyBucket},
	"rate":      {algorithm.TokenBucket, algorithm.LeakyBucket},
	"burst":     {algorithm.GCRA},
	"tolerance": {algorithm.BoundedLog},
	"max_delay": {algorithm.LeakyBucket},
}

func parseFloodgate(d *decoder, doc *yaml.Node) *Set {
	s := &Set{format: formatFloodgate}
	f := d.fields(doc, "the file", topFields...)
	if v, ok := f["domain"]; ok {
		if dom, ok := d.str(v.value, "domain"); ok {
			if !validDomain.MatchString(dom) {
				d.errorf(v.value, "domain %q must start with a letter or digit and hold only letters, digits and _ . : - (at most 128)", clip(dom))
			}
			s.domain = dom
		}
	} else {
		d.errorf(doc, "domain is missing; add a line such as domain: api")
	}
	if v, ok := f["shadow"]; ok {
		s.shadow, _ = d.boolean(v.value, "shadow")
	}
	if v, ok := f["prices"]; ok {
		s.prices = d.prices(v.value)
	}
	defer d.checkPrices(s, doc)
	rl, ok := f["rules"]
	if !ok {
		return s
	}
	if rl.value.Kind != yaml.SequenceNode {
		d.errorf(rl.value, "rules must be a list, each item starting with - name: ...; got %s", kindName(rl.value))
		return s
	}
	if len(rl.value.Content) > maxRules {
		d.errorf(rl.value, "%d rules; the most is %d", len(rl.value.Content), maxRules)
		return s
	}
	seen := map[string]int{}
	for _, n := range rl.value.Content {
		r := d.rule(n, len(s.rules))
		if r == nil {
			continue
		}
		if first, dup := seen[r.name]; dup {
			d.errorf(n, "rule name %q is already used on line %d; give each rule its own name", r.name, first)
			continue
		}
		seen[r.name] = r.line
		s.rules = append(s.rules, r)
	}
	if s.shadow {
		for _, r := range s.rules {
			r.shadow = true
		}
	}
	return s
}

// rule parses one rule of Floodgate's format.
func (d *decoder) rule(n *yaml.Node, index int) *rule {
	before := len(d.errs)
	what := ruleWhat(n)
	f := d.fields(n, what, ruleFields...)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	r := &rule{index: index, line: n.Line}
	unlimited := d.ruleFields(r, n, f, what)
	cfg := d.ruleAlgorithm(f, what)
	// The rule's limits, its overrides' included, count in one counter, so
	// that a changed limit (a reload) or a key's other plan keeps its count.
	cfg.Counter = r.id
	if v, ok := f["hash_tag"]; ok {
		// Rules of one hash tag keep their keys in one Redis Cluster slot,
		// so that a request passing several is counted on all or none.
		if tag, ok := d.str(v.value, what+": hash_tag"); ok {
			if !validName.MatchString(tag) {
				d.errorf(v.value, "%s: hash_tag %q must start with a letter or digit and hold only letters, digits and _ . : - (at most 64)", what, clip(tag))
			}
			cfg.Counter = "{" + tag + "}" + r.id
		}
	}
	if v, ok := f["leases"]; ok {
		d.ruleLeases(&cfg, v.value, what+": leases")
	}
	d.ruleLimit(r, &cfg, n, f, what, unlimited)
	d.ruleOverrides(r, cfg, n, f, what, unlimited)
	if len(d.errs) > before {
		return nil
	}
	if !r.base.unlimited {
		l, err := newLimit(cfg)
		if err != nil {
			d.errorf(n, "%s: %v", what, err)
			return nil
		}
		r.base = l
	}
	if r.cost.fixed > 0 && r.cost.fixed > r.base.limit && !r.base.unlimited && !r.base.block && len(r.overrides) == 0 {
		d.errorf(f["cost"].value, "%s: cost %d is above the limit %d, so every request would be rejected; lower the cost or raise the limit", what, r.cost.fixed, r.base.limit)
		return nil
	}
	return r
}

// ruleWhat names a rule in error messages: by its name when it has one.
func ruleWhat(n *yaml.Node) string {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
				return fmt.Sprintf("rule %q", clip(v.Value))
			}
		}
	}
	return "rule"
}

// ruleFields reads a rule's name, description, match, count_by, shadow,
// failure and cost into r, and reports whether the rule is unlimited.
func (d *decoder) ruleFields(r *rule, n *yaml.Node, f map[string]field, what string) (unlimited bool) {
	if v, ok := f["name"]; ok {
		if name, ok := d.str(v.value, "name"); ok {
			if !validName.MatchString(name) {
				d.errorf(v.value, "rule name %q must start with a letter or digit and hold only letters, digits and _ . : - (at most 64)", clip(name))
			}
			r.name, r.id = name, name
		}
	} else {
		d.errorf(n, "rule has no name; add name: with a short unique name such as per-member")
	}
	if v, ok := f["description"]; ok {
		d.str(v.value, what+": description")
	}
	if v, ok := f["match"]; ok {
		r.match = d.conditions(v.value, what+": match")
	}
	if v, ok := f["unlimited"]; ok {
		unlimited, _ = d.boolean(v.value, what+": unlimited")
	}
	if v, ok := f["count_by"]; ok {
		r.countBy = d.countBy(v.value, what)
	} else if !unlimited {
		d.errorf(n, "%s: count_by is missing; list the entries each counter is kept for (count_by: [member]), or write count_by: global for one counter shared by every request", what)
	}
	if v, ok := f["shadow"]; ok {
		r.shadow, _ = d.boolean(v.value, what+": shadow")
	}
	if v, ok := f["failure"]; ok {
		r.failure = d.failure(v.value, what)
	}
	if v, ok := f["charge_after_response"]; ok {
		r.late, _ = d.boolean(v.value, what+": charge_after_response")
	}
	if v, ok := f["cost"]; ok {
		r.cost = d.cost(v.value, what)
	}
	if v, ok := f["warn_at"]; ok {
		d.warnAt(r, v, what, unlimited)
	}
	return unlimited
}

// ruleAlgorithm reads a rule's algorithm (bounded-log when absent) and the
// parameters that belong to it.
func (d *decoder) ruleAlgorithm(f map[string]field, what string) algorithm.Config {
	cfg := algorithm.Config{Algorithm: algorithm.BoundedLog}
	if v, ok := f["algorithm"]; ok {
		if a, ok := d.str(v.value, what+": algorithm"); ok {
			if name := algorithm.Name(a); !name.Valid() {
				names := nameStrings(algorithm.Names())
				d.errorf(v.value, "%s: unknown algorithm %q; use one of %s%s", what, clip(a), strings.Join(names, ", "), suggest(a, names))
			} else {
				cfg.Algorithm = name
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(paramAlgorithms)) {
		v, ok := f[p]
		if !ok {
			continue
		}
		if !slices.Contains(paramAlgorithms[p], cfg.Algorithm) {
			d.errorf(v.key, "%s: %s does not apply to %s (it is for %s); remove it or change algorithm", what, p, cfg.Algorithm, strings.Join(nameStrings(paramAlgorithms[p]), " and "))
			continue
		}
		d.ruleParam(&cfg, p, v.value, what+": "+p)
	}
	return cfg
}

// defaultLeaseHolders is how many quota lease holders a key of a rule with
// leases: true keeps at once (algorithm.Config.Holds).
const defaultLeaseHolders = 64

// ruleLeases reads a rule's leases field (true, or {ttl, holders}) into
// cfg: its keys keep holds for quota leases (algorithm.Config.Holds).
func (d *decoder) ruleLeases(cfg *algorithm.Config, v *yaml.Node, what string) {
	if v.Kind == yaml.ScalarNode {
		if on, ok := d.boolean(v, what); ok && on {
			cfg.Holds = defaultLeaseHolders
		}
		return
	}
	f := d.fields(v, what, leaseFields...)
	if v.Kind != yaml.MappingNode {
		return
	}
	cfg.Holds = defaultLeaseHolders
	if x, ok := f["holders"]; ok {
		if n, ok := d.integer(x.value, what+": holders", 1, lease.MaxPerKey); ok {
			cfg.Holds = int(n)
		}
	}
	if x, ok := f["ttl"]; ok {
		if ttl, ok := d.duration(x.value, what+": ttl"); ok {
			cfg.HoldTTL = ttl
		}
	}
}

// ruleParam reads one algorithm parameter p into cfg.
func (d *decoder) ruleParam(cfg *algorithm.Config, p string, v *yaml.Node, what string) {
	switch p {
	case "slices":
		// algorithm.New bounds the slices (1 to 1024) and its error names
		// the rule; 0 would be its default.
		if x, ok := d.integer(v, what, math.MinInt32, math.MaxInt32); ok && x == 0 {
			d.errorf(v, "%s must be at least 1; got 0", what)
		} else if ok {
			cfg.Slices = int(x)
		}
	case "capacity":
		cfg.Capacity, _ = d.integer(v, what, 1, maxLimit)
	case "rate":
		cfg.Rate, _ = d.number(v, what+" (units per second)", 0, maxLimit)
	case "burst":
		cfg.Burst, _ = d.integer(v, what, 1, maxLimit)
	case "tolerance":
		cfg.Tolerance, _ = d.number(v, what, 0, 1)
	case "max_delay":
		cfg.MaxDelay, _ = d.duration(v, what)
	}
}

// ruleLimit reads a rule's limit and window into cfg, or marks r unlimited.
func (d *decoder) ruleLimit(r *rule, cfg *algorithm.Config, n *yaml.Node, f map[string]field, what string, unlimited bool) {
	lv, hasLimit := f["limit"]
	wv, hasWindow := f["window"]
	cv, hasCalendar := f["calendar"]
	ov, hasCarry := f["carry_over"]
	switch {
	case unlimited && (hasLimit || hasWindow || hasCalendar):
		d.errorf(n, "%s: an unlimited rule takes no limit, window or calendar; remove them or unlimited: true", what)
	case unlimited:
		r.base.unlimited = true
	default:
		if hasLimit {
			cfg.Limit, _ = d.integer(lv.value, what+": limit", 0, maxLimit)
		} else {
			d.errorf(n, "%s: limit is missing; write the number of requests (or cost units) allowed per window, such as limit: 100", what)
		}
		switch {
		case hasWindow && hasCalendar:
			d.errorf(cv.key, "%s: give a window or a calendar period, not both", what)
		case hasCalendar:
			d.calendar(cfg, cv.value, what, f)
		case hasWindow:
			cfg.Window, _ = d.duration(wv.value, what+": window")
		case cfg.Algorithm != algorithm.Concurrency:
			d.errorf(n, "%s: window is missing; write any Go duration, such as window: 1m or window: 90s, or a calendar period such as calendar: {period: month, zone: America/New_York}", what)
		}
	}
	if hasCarry {
		if !hasCalendar {
			d.errorf(ov.key, "%s: carry_over needs a calendar period (calendar: {period: month, ...}): a rolling window has no period to carry into", what)
		} else {
			cfg.CarryOver, _ = d.integer(ov.value, what+": carry_over", 0, maxLimit)
		}
	}
}

// calendar reads a rule's calendar period into cfg. A calendar period is a
// fixed window by definition: the rule's algorithm must be fixed-window or
// absent.
func (d *decoder) calendar(cfg *algorithm.Config, n *yaml.Node, what string, rf map[string]field) {
	what += ": calendar"
	f := d.fields(n, what, calendarFields...)
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping such as {period: month, zone: America/New_York, start: 15}; got %s", what, kindName(n))
		return
	}
	if av, ok := rf["algorithm"]; ok && cfg.Algorithm != algorithm.FixedWindow {
		d.errorf(av.value, "%s: a calendar period is a fixed window by definition; remove algorithm: %s or write algorithm: fixed-window", what, cfg.Algorithm)
		return
	}
	for _, p := range slices.Sorted(maps.Keys(paramAlgorithms)) {
		if v, ok := rf[p]; ok {
			d.errorf(v.key, "%s: %s does not apply to a calendar period, which is a fixed window; remove it", what, p)
		}
	}
	cfg.Algorithm = algorithm.FixedWindow
	cfg.Tolerance = 0
	if v, ok := f["period"]; ok {
		cfg.Calendar.Period, _ = d.str(v.value, what+": period")
	} else {
		d.errorf(n, "%s: period is missing; write day, week, month or year", what)
	}
	if v, ok := f["zone"]; ok {
		cfg.Calendar.Zone, _ = d.str(v.value, what+": zone")
	}
	if v, ok := f["start"]; ok {
		st, _ := d.integer(v.value, what+": start", 1, 31)
		cfg.Calendar.Start = int(st)
	}
}

// ruleOverrides reads a rule's overrides; an unlimited rule with limiting
// overrides must say what it counts by.
func (d *decoder) ruleOverrides(r *rule, cfg algorithm.Config, n *yaml.Node, f map[string]field, what string, unlimited bool) {
	if v, ok := f["overrides"]; ok {
		if v.value.Kind != yaml.SequenceNode {
			d.errorf(v.value, "%s: overrides must be a list of - match: {...} with limit: or unlimited: true; got %s", what, kindName(v.value))
		} else {
			for _, on := range v.value.Content {
				if o, ok := d.override(on, what, cfg, unlimited); ok {
					r.overrides = append(r.overrides, o)
				}
			}
		}
	}
	if _, ok := f["count_by"]; ok || !unlimited {
		return
	}
	for _, o := range r.overrides {
		if !o.lim.unlimited {
			d.errorf(n, "%s: an override limits requests, so the rule needs count_by too: list the entries each counter is kept for, or write count_by: global", what)
			return
		}
	}
}

// override parses one entry of overrides; base is the rule's algorithm
// configuration, whose limit and window it may replace (its other
// parameters stay the rule's).
func (d *decoder) override(n *yaml.Node, what string, base algorithm.Config, baseUnlimited bool) (override, bool) {
	before := len(d.errs)
	f := d.fields(n, what+": override", overrideFields...)
	o := override{line: n.Line}
	if n.Kind != yaml.MappingNode {
		return o, false
	}
	if v, ok := f["match"]; ok {
		o.match = d.conditions(v.value, what+": override match")
		if len(o.match) == 0 && len(d.errs) == before {
			d.errorf(v.value, "%s: an override needs at least one match condition, such as match: {plan: pro}", what)
		}
	} else {
		d.errorf(n, "%s: override has no match; say which requests it is for, such as match: {plan: pro}", what)
	}
	unlimited := false
	if v, ok := f["unlimited"]; ok {
		unlimited, _ = d.boolean(v.value, what+": override unlimited")
	}
	lv, hasLimit := f["limit"]
	wv, hasWindow := f["window"]
	cfg := base
	switch {
	case unlimited && (hasLimit || hasWindow):
		d.errorf(n, "%s: an unlimited override takes no limit or window; remove them or unlimited: true", what)
	case unlimited:
		o.lim.unlimited = true
	case !hasLimit && !hasWindow:
		d.errorf(n, "%s: override changes nothing; give it a limit:, a window: or unlimited: true", what)
	default:
		if hasLimit {
			cfg.Limit, _ = d.integer(lv.value, what+": override limit", 0, maxLimit)
		}
		if hasWindow && !cfg.Calendar.IsZero() {
			d.errorf(wv.key, "%s: an override of a calendar rule changes its limit, not its period; remove window:", what)
		} else if hasWindow {
			cfg.Window, _ = d.duration(wv.value, what+": override window")
		}
		if cfg.Window <= 0 && cfg.Calendar.IsZero() && cfg.Algorithm != algorithm.Concurrency {
			d.errorf(n, "%s: override of an unlimited rule needs a window too, such as window: 1m", what)
		}
		if baseUnlimited && !hasLimit {
			d.errorf(n, "%s: override of an unlimited rule needs a limit too, such as limit: 100", what)
		}
	}
	if len(d.errs) > before {
		return o, false
	}
	if !o.lim.unlimited {
		l, err := newLimit(cfg)
		if err != nil {
			d.errorf(n, "%s: override: %v", what, err)
			return o, false
		}
		o.lim = l
	}
	return o, true
}

// conditions parses a match mapping: entry key -> pattern.
func (d *decoder) conditions(n *yaml.Node, what string) conditions {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping of entry: pattern, such as {path: /loan/*, member: \"*\"}; got %s", what, kindName(n))
		return nil
	}
	var cs conditions
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key, ok := d.entryKey(kn, what+" entry")
		if !ok {
			continue
		}
		if c := cs.find(key); c != nil {
			d.errorf(kn, "%s: entry %q appears twice; write it once (a list of patterns matches any of them)", what, key)
			continue
		}
		m, ok := d.pattern(vn, fmt.Sprintf("%s %s", what, key), true)
		if ok {
			cs = append(cs, condition{key: key, m: m})
		}
	}
	return cs
}

// pattern parses a value pattern: a string ("*" any value, containing "*" a
// glob, else exact), a mapping {exact|prefix|glob|cidr: s} or {any: true}, or,
// when list is true, a list of those (any of them).
func (d *decoder) pattern(n *yaml.Node, what string, list bool) (matcher, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		s, ok := d.str(n, what)
		if !ok {
			return matcher{}, false
		}
		switch {
		case s == "*":
			return matcher{kind: matchAny}, true
		case strings.Contains(s, "*"):
			return newGlob(s), true
		}
		return matcher{kind: matchExact, s: s}, true
	case yaml.SequenceNode:
		return d.patternList(n, what, list)
	case yaml.MappingNode:
		return d.patternMapping(n, what)
	}
	d.errorf(n, "%s: a pattern is a value, \"*\", a glob such as /loan/*, {prefix: /loan/}, or a list of these; got %s", what, kindName(n))
	return matcher{}, false
}

// patternList reads a list of patterns, any of which may match; lists do
// not nest.
func (d *decoder) patternList(n *yaml.Node, what string, list bool) (matcher, bool) {
	if !list {
		d.errorf(n, "%s: lists of patterns cannot be nested", what)
		return matcher{}, false
	}
	if len(n.Content) == 0 {
		d.errorf(n, "%s: the list of patterns is empty; give at least one", what)
		return matcher{}, false
	}
	m := matcher{kind: matchOneOf}
	for _, c := range n.Content {
		a, ok := d.pattern(c, what, false)
		if !ok {
			return matcher{}, false
		}
		m.alts = append(m.alts, a)
	}
	return m, true
}

// patternMapping reads a pattern written as a one-field mapping: exact,
// prefix, glob, cidr or any.
func (d *decoder) patternMapping(n *yaml.Node, what string) (matcher, bool) {
	f := d.fields(n, what, matchFields...)
	if len(f) != 1 {
		if len(n.Content) > 0 && len(f) > 1 {
			d.errorf(n, "%s: give exactly one of exact, prefix, glob, cidr or any", what)
		} else if len(n.Content) == 0 {
			d.errorf(n, "%s: empty pattern; give one of exact, prefix, glob, cidr or any", what)
		}
		return matcher{}, false
	}
	for k, v := range f {
		if k == "any" {
			b, ok := d.boolean(v.value, what+": any")
			if ok && !b {
				d.errorf(v.value, "%s: any: false matches nothing; remove the condition or write any: true", what)
				return matcher{}, false
			}
			return matcher{kind: matchAny}, ok
		}
		s, ok := d.str(v.value, what+": "+k)
		if !ok {
			return matcher{}, false
		}
		switch k {
		case "cidr":
			return d.cidr(v.value, s, what)
		case "exact":
			return matcher{kind: matchExact, s: s}, true
		case "prefix":
			return matcher{kind: matchPrefix, s: s}, true
		default:
			return newGlob(s), true
		}
	}
	return matcher{}, false // not reached: f has one field
}

// cidr reads an address range, or a single address as a full-length range;
// IPv4-mapped IPv6 ranges become IPv4 ranges.
func (d *decoder) cidr(n *yaml.Node, s, what string) (matcher, bool) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			p, err = a.Prefix(a.BitLen())
		}
	}
	if err != nil {
		d.errorf(n, "%s: cidr %q is not an address range; write one such as 10.0.0.0/8 or 2001:db8::/32", what, clip(s))
		return matcher{}, false
	}
	if p.Addr().Is4In6() {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return matcher{kind: matchCIDR, cidr: p.Masked()}, true
}

func (d *decoder) countBy(n *yaml.Node, what string) []string {
	if n.Kind == yaml.ScalarNode && n.Value == "global" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			d.errorf(n, "%s: count_by must be a list, such as count_by: [%s], or the word global", what, clip(n.Value))
		} else {
			d.errorf(n, "%s: count_by must be a list of entry keys, such as [member] or [client, path], or the word global; got %s", what, kindName(n))
		}
		return nil
	}
	if len(n.Content) == 0 {
		d.errorf(n, "%s: count_by is an empty list; list entry keys, or write count_by: global for one shared counter", what)
		return nil
	}
	if len(n.Content) > maxDescriptorEntries {
		d.errorf(n, "%s: count_by lists %d keys; the most is %d", what, len(n.Content), maxDescriptorEntries)
		return nil
	}
	var keys []string
	for _, c := range n.Content {
		k, ok := d.entryKey(c, what+": count_by key")
		if !ok {
			continue
		}
		if contains(keys, k) {
			d.errorf(c, "%s: count_by lists %q twice; list it once", what, k)
			continue
		}
		if k == "global" {
			d.errorf(c, "%s: for one counter shared by every request write count_by: global, not a list", what)
			continue
		}
		keys = append(keys, k)
	}
	return keys
}

func (d *decoder) failure(n *yaml.Node, what string) store.FailurePolicy {
	s, ok := d.str(n, what+": failure")
	if !ok {
		return store.FailOpen
	}
	switch s {
	case "open":
		return store.FailOpen
	case "closed":
		return store.FailClosed
	case "local":
		return store.FailLocal
	}
	d.errorf(n, "%s: failure %q is not a policy; use open (never reject because the store is down), closed (reject while it is down) or local (enforce a share of the limit on each node)", what, clip(s))
	return store.FailOpen
}

func (d *decoder) cost(n *yaml.Node, what string) cost {
	if n.Kind == yaml.ScalarNode {
		v, _ := d.integer(n, what+": cost", 1, maxLimit)
		return cost{fixed: v}
	}
	f := d.fields(n, what+": cost", costFields...)
	c := cost{def: 1}
	if n.Kind != yaml.MappingNode {
		return c
	}
	if v, ok := f["usage"]; ok {
		c.usage = d.usageCost(v.value, what+": cost usage")
		if _, from := f["from"]; from {
			d.errorf(n, "%s: cost takes from or usage, not both", what)
		}
		if _, def := f["default"]; def {
			d.errorf(n, "%s: cost default goes with from; with usage a request without usage counts its hits", what)
		}
		return c
	}
	if v, ok := f["from"]; ok {
		c.from, _ = d.entryKey(v.value, what+": cost from")
	} else {
		d.errorf(n, "%s: cost needs from: naming the entry that holds it, such as from: header:x-tokens", what)
	}
	if v, ok := f["default"]; ok {
		c.def, _ = d.integer(v.value, what+": cost default", 1, maxLimit)
	}
	return c
}

// nameStrings returns algorithm names as strings, for error messages.
func nameStrings(names []algorithm.Name) []string {
	var out []string
	for _, n := range names {
		out = append(out, string(n))
	}
	return out
}
