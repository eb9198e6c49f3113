package rules

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/rules/internal/ruledir"
	"github.com/floodgate-dev/floodgate/store"
)

// File formats Parse recognizes, as Set.Format reports them.
const (
	formatFloodgate = "floodgate"
	formatEnvoy     = "envoy-ratelimit"
)

// Set is a parsed, validated rule set. It is immutable and safe for
// concurrent use.
type Set struct {
	file   string
	domain string
	format string
	shadow bool
	rules  []*rule
	tree   *envoyNode // envoyproxy/ratelimit format only
	// more holds the sets of the other files of a directory, one domain
	// each; the receiver is the first file's.
	more []*Set
	// overrides holds the rules built for request Overrides.
	overrides overrideTable
	// prices is the file's price table (prices.go); nil for none.
	prices *priceTable
	// usage reports that a rule counts usage (cost: {usage: ...}).
	usage bool
}

// rule is one compiled rule. In the envoyproxy/ratelimit format it is one
// rate_limit block.
type rule struct {
	index int
	// id is unique in the set and is part of every counter key.
	id string
	// name is what Status.Rule reports: the rule's name, or in the
	// envoyproxy/ratelimit format the rate limit's name or else its id.
	name string
	line int
	// match is the rule's conditions. In the envoyproxy/ratelimit format
	// matching walks the tree instead; match then only describes the path.
	match conditions
	// countBy lists the entry keys counted by; empty with countAll false
	// means one global bucket.
	countBy []string
	// countAll counts by every entry of the descriptor (envoyproxy/ratelimit).
	countAll  bool
	base      limit
	overrides []override
	cost      cost
	shadow    bool
	failure   store.FailurePolicy
	// late marks a budget charged after the response (charge.go).
	late bool
	// warnPPM is the warning level in millionths of the limit (warn_at);
	// 0 for none.
	warnPPM int64
	// limitName and replaces implement envoyproxy/ratelimit's replaces;
	// limitName is also the name RLS answers report (empty: none).
	limitName string
	replaces  []string
	// quota marks an envoyproxy/ratelimit quota_mode limit: it rejects a
	// request only when every quota limit applied to it rejects.
	quota bool
	// shared holds, per entry of the descriptor, the share_threshold
	// pattern that entry counts by instead of its value ("" where none).
	shared []string
}

// limit is a rule's limit, or an override's.
type limit struct {
	unlimited bool
	block     bool // limit 0: reject everything
	limit     int64
	window    time.Duration
	alg       algorithm.Algorithm
	// algName is the algorithm the rule names; a block decides with a
	// fixed window of its own instead.
	algName algorithm.Name
	// reject is the cost that makes alg reject without counting: above its
	// limit and capacity.
	reject int64
}

type override struct {
	match conditions
	lim   limit
	line  int
}

// cost is how much a request weighs for a rule.
type cost struct {
	fixed int64  // 0: not fixed
	from  string // entry key to read the cost from
	def   int64  // cost when the entry is missing
	// usage is what the rule counts of a request's usage (prices.go).
	usage usageKind
}

// Domain returns the set's domain; for a directory, the domain of its first
// file, which requests without a domain are checked in.
func (s *Set) Domain() string { return s.domain }

// Domains returns every domain of the set, the first one first.
func (s *Set) Domains() []string {
	out := []string{s.domain}
	for _, m := range s.more {
		out = append(out, m.domain)
	}
	return out
}

// File returns the name the set was parsed from (for a directory, its
// first file).
func (s *Set) File() string { return s.file }

// Format returns the format the rules were written in, "floodgate" or
// "envoy" (envoyproxy/ratelimit's; for a directory, the first file's).
func (s *Set) Format() string { return s.format }

// Shadow reports the file's global shadow switch (for a directory, the
// first file's; each file's switch applies to its own rules).
func (s *Set) Shadow() bool { return s.shadow }

// Len returns the number of rules, in every domain.
func (s *Set) Len() int {
	n := len(s.rules)
	for _, m := range s.more {
		n += len(m.rules)
	}
	return n
}

// all returns the set and its other domains' sets.
func (s *Set) all() []*Set { return append([]*Set{s}, s.more...) }

//go:embed default.yaml
var defaultRules []byte

var defaultSet = sync.OnceValues(func() (*Set, error) {
	return Parse("default.yaml", defaultRules)
})

// Default returns the rules built into the binary (rules/default.yaml), used
// when the server is given no rule file. The file is tested to parse; should
// it ever fail, Default returns an empty set in the domain "default" rather
// than panic.
func Default() *Set {
	s, err := defaultSet()
	if err != nil {
		return &Set{file: "default.yaml", domain: "default", format: formatFloodgate}
	}
	return s
}

// defaultErr returns the error, if any, of parsing the built-in rule file.
func defaultErr() error {
	_, err := defaultSet()
	return err
}

// Load reads and parses the rule file at path. If path is a directory,
// every *.yaml and *.yml file in it (not in subdirectories, not dot-files)
// is loaded, in name order, each holding one domain, as envoyproxy/ratelimit
// reads its configuration directory; two files with the same domain are an
// error. Requests without a domain are checked in the first file's domain.
func Load(path string) (*Set, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return loadDir(path)
	}
	return loadFile(path)
}

func loadDir(dir string) (*Set, error) {
	files, err := ruledir.Files(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, &Error{File: dir, Msg: "the directory holds no .yaml or .yml rule files"}
	}
	var sets []*Set
	var errs []error
	where := map[string]string{}
	for _, f := range files {
		s, err := loadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := where[s.domain]; dup {
			errs = append(errs, &Error{File: f, Line: 1, Msg: fmt.Sprintf("domain %q is also defined in %s; keep each domain in one file", s.domain, prev)})
			continue
		}
		where[s.domain] = f
		sets = append(sets, s)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	first := sets[0]
	first.more = sets[1:]
	return first, nil
}

func loadFile(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxFileSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file is %d bytes; the most is %d", st.Size(), maxFileSize)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Parse parses a rule file's contents; name is used in error messages. It
// reads Floodgate's format (a top-level "rules" list) and envoyproxy/
// ratelimit's (a top-level "descriptors" list). Errors read
// "NAME:LINE: what is wrong; how to fix it", one per line.
func Parse(name string, data []byte) (*Set, error) {
	if len(data) > maxFileSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("file is %d bytes; the most is %d", len(data), maxFileSize)}
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && err != io.EOF {
		return nil, yamlError(name, data, err)
	}
	d := &decoder{file: name}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		return nil, yamlError(name, data, err)
	default:
		d.errorf(&next, "a second YAML document starts here (after ---); a rule file holds one document, so remove the --- line or split the file")
		return nil, d.err()
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		d.errorf(nil, "the file is empty; write a domain and a list of rules (see docs/rules.md)")
		return nil, d.err()
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		d.errorf(doc, "a rule file is a mapping with domain: and rules: (or descriptors: for the envoyproxy/ratelimit format); got %s", kindName(doc))
		return nil, d.err()
	}
	var hasRules, hasDescriptors bool
	for i := 0; i+1 < len(doc.Content); i += 2 {
		switch doc.Content[i].Value {
		case "rules":
			hasRules = true
		case "descriptors":
			hasDescriptors = true
		}
	}
	var s *Set
	switch {
	case hasRules && hasDescriptors:
		d.errorf(doc, "the file has both rules: (Floodgate format) and descriptors: (envoyproxy/ratelimit format); keep one")
	case hasDescriptors:
		s = parseEnvoy(d, doc)
	case hasRules:
		s = parseFloodgate(d, doc)
	default:
		d.errorf(doc, "no rules: write a rules: list (Floodgate format) or a descriptors: list (envoyproxy/ratelimit format)")
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	s.file = name
	return s, nil
}

var yamlAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)

// yamlError turns a yaml.v3 syntax error into FILE:LINE form, with a hint
// for the usual causes.
func yamlError(name string, data []byte, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		err = errors.New(strings.Join(te.Errors, "; "))
	}
	msg := err.Error()
	const starHint = `; a value starting with * is read as a YAML alias: quote it, as in "*" or "*.example.com"`
	if m := yamlAnchor.FindStringSubmatch(msg); m != nil {
		line := 0
		for i, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "*"+m[1]) {
				line = i + 1
				break
			}
		}
		return &Error{File: name, Line: line, Msg: "YAML alias *" + clip(m[1]) + " refers to nothing" + starHint}
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		hint := "; check the indentation and quoting on this line and the one before"
		lines := strings.Split(string(data), "\n")
		switch {
		case strings.Contains(m[2], "alphabetic or numeric character"):
			hint = starHint
		case line >= 1 && line <= len(lines) && strings.Contains(lines[line-1], "\t"):
			hint = "; the line holds a tab: YAML indents with spaces only"
		}
		return &Error{File: name, Line: line, Msg: "YAML syntax: " + m[2] + hint}
	}
	return &Error{File: name, Msg: strings.TrimPrefix(msg, "yaml: ") + "; the file is not valid YAML"}
}

// entryKey checks a descriptor entry key written in a rule file and returns
// it normalized (header names lower-cased).
func (d *decoder) entryKey(n *yaml.Node, what string) (string, bool) {
	k, ok := d.scalar(n, what)
	if !ok {
		return "", false
	}
	if k == "" {
		d.errorf(n, "%s is empty; name a descriptor entry such as client, member, path or header:x-api-key", what)
		return "", false
	}
	if len(k) > maxKeyLen {
		d.errorf(n, "%s is %d bytes long; the most is %d", what, len(k), maxKeyLen)
		return "", false
	}
	if h, ok := strings.CutPrefix(k, "header:"); ok {
		if h == "" {
			d.errorf(n, "%s %q names no header; write header:NAME, such as header:x-api-key", what, k)
			return "", false
		}
		k = "header:" + strings.ToLower(h)
	}
	return k, true
}

// ErrInvalidRequest is wrapped by the errors Check, Release and Keys return
// for a request beyond the bounds (too many descriptors or entries, an entry
// key too long, negative hits). Front ends answer such requests with a
// client error, not a decision.
var ErrInvalidRequest = errors.New("rules: invalid request")

// validateRequest checks a request against the bounds. Long values are not
// an error: they are counted by their digest (see ruleKey).
func validateRequest(req *Request) error {
	if len(req.Descriptors) > maxDescriptors {
		return fmt.Errorf("%w: %d descriptors; the most is %d", ErrInvalidRequest, len(req.Descriptors), maxDescriptors)
	}
	if req.Hits < 0 || req.Hits > maxLimit {
		return fmt.Errorf("%w: hits must be between 0 and %d; got %d", ErrInvalidRequest, int64(maxLimit), req.Hits)
	}
	if u := req.Usage; u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 ||
		u.InputTokens > maxLimit || u.OutputTokens > maxLimit || u.CachedInputTokens > maxLimit {
		return fmt.Errorf("%w: usage: token counts must be between 0 and %d; got input %d, output %d, cached input %d",
			ErrInvalidRequest, int64(maxLimit), u.InputTokens, u.OutputTokens, u.CachedInputTokens)
	}
	if n := len(req.Overrides); n > 0 && n != len(req.Descriptors) {
		return fmt.Errorf("%w: %d overrides for %d descriptors; give one per descriptor or none", ErrInvalidRequest, n, len(req.Descriptors))
	}
	for i, o := range req.Overrides {
		if o == (Override{}) {
			continue
		}
		if o.Window <= 0 || o.Window > maxWindow || o.Limit < 0 || o.Limit > maxLimit {
			return fmt.Errorf("%w: descriptor %d: limit override %d per %s is out of range (0 to %d per 1ns to %s)",
				ErrInvalidRequest, i, o.Limit, o.Window, int64(maxLimit), window.Format(maxWindow))
		}
	}
	for i, d := range req.Descriptors {
		if len(d) > maxDescriptorEntries {
			return fmt.Errorf("%w: descriptor %d has %d entries; the most is %d", ErrInvalidRequest, i, len(d), maxDescriptorEntries)
		}
		for _, e := range d {
			if len(e.Key) > maxKeyLen {
				return fmt.Errorf("%w: descriptor %d: an entry key is %d bytes long; the most is %d", ErrInvalidRequest, i, len(e.Key), maxKeyLen)
			}
		}
	}
	return nil
}

// applied is one rule applying to one descriptor of a request.
type applied struct {
	r    *rule
	desc int
	key  string
	lim  *limit
	cost int64
	// costErr says why the cost entry could not be read; the rule then
	// rejects.
	costErr string
}

// resolve finds the rules that apply to req, in rule-file order.
func (s *Set) resolve(req Request, out []applied) ([]applied, error) {
	if err := validateRequest(&req); err != nil {
		return out, err
	}
	if req.Domain != "" && req.Domain != s.domain {
		for _, m := range s.more {
			if m.domain == req.Domain {
				return m.resolve(req, out)
			}
		}
		return out, nil
	}
	hits := req.Hits
	if hits == 0 {
		hits = 1
	}
	if s.tree != nil {
		return s.resolveEnvoy(req, hits, out)
	}
	for _, r := range s.rules {
		for i, d := range req.Descriptors {
			if overridden(req, i) || !r.match.match(d) {
				continue
			}
			out = s.apply(out, r, i, d, hits)
		}
	}
	out, err := s.applyOverrides(req, hits, out)
	if err != nil || !s.usage {
		return out, err
	}
	return s.usageCosts(&req, hits, out)
}

// overridden reports whether descriptor i of req carries an Override.
func overridden(req Request, i int) bool {
	return len(req.Overrides) > 0 && req.Overrides[i].Window > 0
}

// applyOverrides appends the limits req's Overrides set, after the rules.
func (s *Set) applyOverrides(req Request, hits int64, out []applied) ([]applied, error) {
	for i, d := range req.Descriptors {
		if !overridden(req, i) {
			continue
		}
		r, err := s.overrides.rule(req.Overrides[i])
		if err != nil {
			return out, err
		}
		out = s.apply(out, r, i, d, hits)
	}
	return out, nil
}

// apply appends rule r applied to descriptor d, unless d lacks an entry r
// counts by or r already applies with the same key.
func (s *Set) apply(out []applied, r *rule, i int, d Descriptor, hits int64) []applied {
	key, ok := ruleKey(s.domain, r, d)
	if !ok {
		return out
	}
	for j := range out {
		// A rule that counts usage sees each descriptor: descriptors that
		// give tokens are summed into one cost (usageCosts).
		if out[j].r == r && out[j].key == key && r.cost.usage == usageNone {
			return out
		}
	}
	a := applied{r: r, desc: i, key: key, lim: &r.base}
	for k := range r.overrides {
		if r.overrides[k].match.match(d) {
			a.lim = &r.overrides[k].lim
			break
		}
	}
	switch {
	case r.cost.fixed > 0:
		a.cost = r.cost.fixed
	case r.cost.from != "":
		a.cost = r.cost.def
		if v, ok := d.Get(r.cost.from); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 || n > maxLimit {
				a.costErr = fmt.Sprintf("cost entry %s=%q is not a whole number from 1 to %d", r.cost.from, clip(v), int64(maxLimit))
			} else {
				a.cost = n
			}
		}
	default:
		a.cost = hits
	}
	return append(out, a)
}

// Keys returns the rules that apply to req and the keys they count by,
// without deciding anything: one Status per rule, with Rule, Descriptor,
// Key, Limit, Window and Unlimited set and no Decision. floodgate check
// uses it to count the buckets a trace creates.
func (s *Set) Keys(req Request) ([]Status, error) {
	apps, err := s.resolve(req, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(apps))
	for i, a := range apps {
		out[i] = Status{Rule: a.r.name, Descriptor: a.desc, Key: a.key,
			Limit: a.lim.limit, Window: a.lim.window, Unlimited: a.lim.unlimited}
	}
	return out, nil
}

// Covering returns the names of the rules that can apply to requests for
// path with method (empty: any method): those whose conditions on the path
// and method entries accept them. Conditions on other entries are assumed
// to be met. floodgate check --routes uses it to find routes no rule covers.
func (s *Set) Covering(method, path string) []string {
	var names []string
	for _, r := range s.allRules() {
		if r.base.unlimited && len(r.overrides) == 0 {
			continue
		}
		if c := r.match.find("path"); c != nil && !c.m.match(path) {
			continue
		}
		if c := r.match.find("method"); c != nil && method != "" && !c.m.match(method) {
			continue
		}
		if !contains(names, r.name) {
			names = append(names, r.name)
		}
	}
	return names
}

// allRules returns the rules of every domain, in file order.
func (s *Set) allRules() []*rule {
	if len(s.more) == 0 {
		return s.rules
	}
	var out []*rule
	for _, m := range s.all() {
		out = append(out, m.rules...)
	}
	return out
}

// Rules describes every rule, in file order (for a directory, file by file).
func (s *Set) Rules() []RuleInfo {
	out := make([]RuleInfo, 0, s.Len())
	for _, m := range s.all() {
		out = m.appendRules(out)
	}
	return out
}

func (s *Set) appendRules(out []RuleInfo) []RuleInfo {
	for _, r := range s.rules {
		info := RuleInfo{
			Name:      r.name,
			Domain:    s.domain,
			Match:     r.match.String(),
			CountBy:   append([]string(nil), r.countBy...),
			Limit:     r.base.limit,
			Window:    r.base.window,
			Calendar:  r.base.calendar(),
			Unlimited: r.base.unlimited,
			Block:     r.base.block,
			Shadow:    r.shadow,
			Failure:   r.failure.String(),
			Line:      r.line,

			ChargeAfterResponse: r.late,
			WarnAt:              float64(r.warnPPM) / 1e6,
		}
		if !r.base.unlimited {
			info.Algorithm = r.base.algName
		}
		if r.countAll {
			// The descriptor has exactly the entries of the rule's path; those
			// matched by one exact value add no buckets.
			for i, c := range r.match {
				if c.m.kind != matchExact && (i >= len(r.shared) || r.shared[i] == "") {
					info.CountBy = append(info.CountBy, c.key)
				}
			}
		}
		switch {
		case len(info.CountBy) > 0:
			info.Key = strings.Join(info.CountBy, "+")
		case len(r.countBy) == 0:
			info.Key = "global"
		}
		switch {
		case r.cost.fixed > 0:
			info.Cost = strconv.FormatInt(r.cost.fixed, 10)
		case r.cost.from != "":
			info.Cost = fmt.Sprintf("%s (default %d)", r.cost.from, r.cost.def)
		case r.cost.usage != usageNone:
			info.Cost = "usage: " + usageName(r.cost.usage)
			if r.cost.usage == usageMoney && s.prices != nil && s.prices.unit != "" {
				info.Cost += " (" + s.prices.unit + ")"
			}
		default:
			info.Cost = "hits (1 per request)"
		}
		for _, o := range r.overrides {
			info.Overrides = append(info.Overrides, o.match.String()+": "+o.lim.String())
		}
		out = append(out, info)
	}
	return out
}

func (l *limit) String() string {
	switch {
	case l.unlimited:
		return "unlimited"
	case l.block:
		return "blocked (limit 0)"
	}
	return fmt.Sprintf("%d per %s", l.limit, window.Format(l.window))
}

// newLimit builds a limit from an algorithm configuration; limit 0 blocks.
func newLimit(c algorithm.Config) (limit, error) {
	l := limit{limit: c.Limit, window: c.Window, algName: c.Algorithm}
	if l.algName == "" {
		l.algName = algorithm.BoundedLog
	}
	if c.Limit == 0 {
		l.block = true
		w := c.Window
		if w <= 0 {
			w = time.Second
		}
		c = algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: w}
	}
	alg, err := algorithm.New(c)
	if err != nil {
		return l, err
	}
	l.alg = alg
	cfg := alg.Config()
	l.reject = max(cfg.Limit, cfg.Capacity) + 1
	return l, nil
}

// reportedName is the name an RLS answer reports for r (current_limit.name):
// a Floodgate rule's name; for an envoyproxy/ratelimit limit (and a
// request's override) the rate_limit's name, empty when it has none, as
// that service reports it.
func (r *rule) reportedName() string {
	if r.countAll {
		return r.limitName
	}
	return r.name
}

// calendar describes the limit's calendar period ("month from the 15th in
// America/New_York", with its carry-over), or returns "" for a window.
func (l limit) calendar() string {
	if l.alg == nil {
		return ""
	}
	c := l.alg.Config()
	if c.Calendar.IsZero() {
		return ""
	}
	if c.CarryOver > 0 {
		return fmt.Sprintf("%s, carrying over up to %d", c.Calendar, c.CarryOver)
	}
	return c.Calendar.String()
}
