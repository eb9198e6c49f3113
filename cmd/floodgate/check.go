package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/rules"
)

// cardinalityFlag collects --cardinality key=N flags.
type cardinalityFlag map[string]int64

func (c cardinalityFlag) String() string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		s = append(s, fmt.Sprintf("%s=%d", k, c[k]))
	}
	return strings.Join(s, ",")
}

func (c cardinalityFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		k, n, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=N, such as member=5000; got %q", part)
		}
		x, err := strconv.ParseInt(n, 10, 64)
		if err != nil || x < 1 || x > 1e12 {
			return fmt.Errorf("%s: the count must be a whole number from 1 to 10^12; got %q", k, n)
		}
		if h, ok := strings.CutPrefix(k, "header:"); ok {
			k = "header:" + strings.ToLower(h)
		}
		c[k] = x
	}
	return nil
}

// checkRule is one rule in check's report.
type checkRule struct {
	Name          string   `json:"name"`
	Domain        string   `json:"domain"`
	Line          int      `json:"line"`
	Match         string   `json:"match"`
	CountBy       []string `json:"count_by"`
	Key           string   `json:"key"`
	Limit         int64    `json:"limit"`
	Window        string   `json:"window"`
	WindowSeconds float64  `json:"window_seconds"`
	Algorithm     string   `json:"algorithm,omitempty"`
	Unlimited     bool     `json:"unlimited,omitempty"`
	Block         bool     `json:"block,omitempty"`
	Shadow        bool     `json:"shadow,omitempty"`
	Failure       string   `json:"failure"`
	Cost          string   `json:"cost"`
	Overrides     []string `json:"overrides,omitempty"`
	// Buckets is how many counters the rule's key creates; nil when unknown.
	Buckets *int64 `json:"buckets"`
	// BucketsFrom says where Buckets came from: "global", "cardinality" or
	// "trace".
	BucketsFrom string `json:"buckets_from,omitempty"`
	// Cap is the most requests the rule lets through per window over all its
	// buckets (limit × buckets, or the sum of each traced bucket's limit);
	// nil when unknown or unlimited.
	Cap *int64 `json:"cap"`
	// Missing names the count_by keys with no --cardinality.
	Missing []string `json:"missing_cardinality,omitempty"`
	// partial is the limit times the buckets of the keys whose cardinality
	// is known, for "N × buckets(missing)".
	partial *big.Int
}

// checkRoute is one line of --routes.
type checkRoute struct {
	Method string   `json:"method,omitempty"`
	Path   string   `json:"path"`
	Rules  []string `json:"rules"`
}

// checkDoc is check's JSON report.
type checkDoc struct {
	File      string       `json:"file"`
	Valid     bool         `json:"valid"`
	Errors    []string     `json:"errors,omitempty"`
	Format    string       `json:"format,omitempty"`
	Domain    string       `json:"domain,omitempty"`
	Domains   []string     `json:"domains,omitempty"`
	Shadow    bool         `json:"shadow,omitempty"`
	Rules     []checkRule  `json:"rules,omitempty"`
	Routes    []checkRoute `json:"routes,omitempty"`
	Uncovered []string     `json:"uncovered,omitempty"`
	Trace     string       `json:"trace,omitempty"`
	Requests  int          `json:"trace_requests,omitempty"`
	Notes     []string     `json:"notes,omitempty"`
}

// checkOptions are check's arguments.
type checkOptions struct {
	file      string
	card      cardinalityFlag
	routes    string
	tracePath string
	strict    bool
	asJSON    bool
}

// parseCheckArgs reads check's arguments; RULES may come before or after
// the flags.
func parseCheckArgs(args []string, stderr io.Writer) (checkOptions, error) {
	o := checkOptions{card: cardinalityFlag{}}
	fs := flag.NewFlagSet("floodgate check", flag.ContinueOnError)
	fs.Var(o.card, "cardinality", "how many distinct values entry `KEY=N` takes, such as member=5000 (repeatable)")
	fs.StringVar(&o.routes, "routes", "", "`FILE` of routes, one per line, optionally with a method (GET /loan/list): show the rules covering each")
	fs.StringVar(&o.tracePath, "trace", "", "count the buckets each rule creates from a CSV `FILE` of requests (header row of entry keys)")
	fs.BoolVar(&o.strict, "strict", false, "exit with status 1 when a route is covered by no rule")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: floodgate check RULES [--routes FILE] [--cardinality key=N ...] [--trace FILE] [--strict] [--json]")
		fmt.Fprintln(stderr, "\nValidates a rule file (Floodgate or envoyproxy/ratelimit format) and prints each rule:")
		fmt.Fprintln(stderr, "what it matches, what it counts by, its limit and its effective cap, the limit times")
		fmt.Fprintln(stderr, "the number of buckets its key creates.")
		fs.PrintDefaults()
	}
	fs.SetOutput(stderr)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	rest := fs.Args()
	if o.file == "" && len(rest) > 0 {
		o.file, rest = rest[0], rest[1:]
		if err := fs.Parse(rest); err != nil {
			return o, err
		}
		rest = fs.Args()
	}
	if o.file == "" {
		fs.Usage()
		return o, errors.New("check: name a rule file")
	}
	if len(rest) > 0 {
		return o, fmt.Errorf("check: unexpected argument %q", rest[0])
	}
	return o, nil
}

// runCheck validates a rule file and shows each rule's effective cap and,
// with --routes, which rules cover each route.
func runCheck(args []string, stdout, stderr io.Writer) error {
	o, err := parseCheckArgs(args, stderr)
	if err != nil {
		return err
	}
	doc := checkDoc{File: o.file}
	set, err := rules.Load(o.file)
	if err != nil {
		doc.Errors = strings.Split(err.Error(), "\n")
		if o.asJSON {
			if err := writeJSON(stdout, doc); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(stderr, "rule file %s is not valid:\n", o.file)
			for _, e := range doc.Errors {
				fmt.Fprintln(stderr, "  "+e)
			}
		}
		return exitError{1}
	}
	if err := buildCheck(&doc, set, o); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if o.asJSON {
		if err := writeJSON(stdout, doc); err != nil {
			return err
		}
	} else {
		printCheck(stdout, doc)
	}
	if o.strict && len(doc.Uncovered) > 0 {
		if !o.asJSON {
			fmt.Fprintf(stderr, "check: %d route(s) covered by no rule (--strict)\n", len(doc.Uncovered))
		}
		return exitError{1}
	}
	return nil
}

// buildCheck fills doc with the valid rule set's rules, their buckets and
// caps (from --cardinality or --trace), the routes' coverage and notes.
func buildCheck(doc *checkDoc, set *rules.Set, o checkOptions) error {
	doc.Valid, doc.Format, doc.Domain, doc.Shadow = true, set.Format(), set.Domain(), set.Shadow()
	doc.Domains = set.Domains()
	for _, info := range set.Rules() {
		doc.Rules = append(doc.Rules, newCheckRule(info, o.card))
	}
	if o.tracePath != "" {
		n, err := countTrace(o.tracePath, set, doc.Rules)
		if err != nil {
			return err
		}
		doc.Trace, doc.Requests = o.tracePath, n
	}
	if o.routes != "" {
		rs, err := readRoutes(o.routes)
		if err != nil {
			return err
		}
		for _, r := range rs {
			r.Rules = set.Covering(r.Method, r.Path)
			if r.Rules == nil {
				r.Rules = []string{}
				doc.Uncovered = append(doc.Uncovered, strings.TrimSpace(r.Method+" "+r.Path))
			}
			doc.Routes = append(doc.Routes, r)
		}
	}
	doc.Notes = checkNotes(*doc)
	return nil
}

// newCheckRule is info in check's report, with buckets and cap from card.
func newCheckRule(info rules.RuleInfo, card cardinalityFlag) checkRule {
	r := checkRule{
		Name: info.Name, Domain: info.Domain, Line: info.Line, Match: info.Match, CountBy: info.CountBy, Key: info.Key,
		Limit: info.Limit, Window: fmtDuration(info.Window), WindowSeconds: info.Window.Seconds(),
		Algorithm: string(info.Algorithm), Unlimited: info.Unlimited, Block: info.Block, Shadow: info.Shadow,
		Failure: info.Failure, Cost: info.Cost, Overrides: info.Overrides,
	}
	if r.CountBy == nil {
		r.CountBy = []string{}
	}
	if len(info.CountBy) == 0 {
		one := int64(1)
		r.Buckets, r.BucketsFrom = &one, "global"
	} else {
		n := big.NewInt(1)
		for _, k := range info.CountBy {
			c, ok := card[k]
			if !ok {
				r.Missing = append(r.Missing, k)
				continue
			}
			n.Mul(n, big.NewInt(c))
		}
		if len(r.Missing) == 0 {
			b := clampBig(n)
			r.Buckets, r.BucketsFrom = &b, "cardinality"
		} else {
			r.partial = n.Mul(n, big.NewInt(r.Limit))
		}
	}
	r.setCap()
	return r
}

// setCap sets Cap to limit × buckets.
func (r *checkRule) setCap() {
	r.Cap = nil
	if r.Buckets == nil || r.Unlimited {
		return
	}
	c := clampBig(new(big.Int).Mul(big.NewInt(r.Limit), big.NewInt(*r.Buckets)))
	r.Cap = &c
}

func clampBig(n *big.Int) int64 {
	if n.IsInt64() {
		return n.Int64()
	}
	return math.MaxInt64
}

// countTrace replays a CSV trace through the rule set without deciding,
// and sets each rule's buckets and cap from the keys it creates. The first
// row names the entry keys; each further row is one request (an empty cell
// leaves its entry out).
func countTrace(path string, set *rules.Set, out []checkRule) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("--trace: trace file: %w", err)
	}
	defer f.Close()
	rd := csv.NewReader(bufio.NewReader(f))
	rd.Comment = '#'
	rd.TrimLeadingSpace = true
	header, err := rd.Read()
	if err != nil {
		return 0, fmt.Errorf("%s: the first row must name the entry keys, such as client,member,path: %w", path, err)
	}
	for i, h := range header {
		if h == "" {
			return 0, fmt.Errorf("%s:1: column %d has no entry key", path, i+1)
		}
	}
	byRule := map[string]*traceStats{}
	n := 0
	for {
		row, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("%s: %w", path, err)
		}
		n++
		var d rules.Descriptor
		for i, v := range row {
			if v != "" {
				d = append(d, rules.Entry{Key: header[i], Value: v})
			}
		}
		keys, err := set.Keys(rules.Request{Descriptors: []rules.Descriptor{d}})
		if err != nil {
			line, _ := rd.FieldPos(0)
			return n, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		for _, k := range keys {
			st := byRule[k.Rule]
			if st == nil {
				st = &traceStats{keys: map[string]struct{}{}}
				byRule[k.Rule] = st
			}
			st.add(k)
		}
	}
	setTraceCaps(out, byRule)
	return n, nil
}

// traceStats are the distinct keys a rule created in a trace.
type traceStats struct {
	keys map[string]struct{}
	cap  int64 // the sum of each key's limit (saturating)
	inf  bool  // a key was unlimited
}

// add counts k once.
func (st *traceStats) add(k rules.Status) {
	if _, seen := st.keys[k.Key]; seen {
		return
	}
	st.keys[k.Key] = struct{}{}
	if k.Unlimited {
		st.inf = true
	} else if st.cap < math.MaxInt64-k.Limit {
		st.cap += k.Limit
	}
}

// setTraceCaps sets each rule's buckets and cap from the trace's keys.
func setTraceCaps(out []checkRule, byRule map[string]*traceStats) {
	for i := range out {
		r := &out[i]
		st := byRule[r.Name]
		b := int64(0)
		if st != nil {
			b = int64(len(st.keys))
		}
		r.Buckets, r.BucketsFrom, r.Missing = &b, "trace", nil
		r.Cap = nil
		if st == nil || !st.inf {
			c := int64(0)
			if st != nil {
				c = st.cap
			}
			r.Cap = &c
		}
	}
}

// readRoutes reads one route per line: "PATH" or "METHOD PATH"; '#' starts
// a comment.
func readRoutes(path string) ([]checkRoute, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--routes: route file: %w", err)
	}
	defer f.Close()
	var out []checkRoute
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		fields := strings.Fields(text)
		switch {
		case len(fields) == 1 && strings.HasPrefix(fields[0], "/"):
			out = append(out, checkRoute{Path: fields[0]})
		case len(fields) == 2 && strings.HasPrefix(fields[1], "/"):
			out = append(out, checkRoute{Method: strings.ToUpper(fields[0]), Path: fields[1]})
		default:
			return nil, fmt.Errorf("%s:%d: want a path starting with / or a method and a path, such as GET /loan/list; got %q", path, line, text)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no routes in the file", path)
	}
	return out, nil
}

// checkNotes points out what an operator should look at.
func checkNotes(doc checkDoc) []string {
	var notes []string
	var missing []string
	global := false
	for _, r := range doc.Rules {
		for _, k := range r.Missing {
			if !slices.Contains(missing, k) {
				missing = append(missing, k)
			}
		}
		if len(r.CountBy) == 0 && !r.Unlimited && !r.Shadow {
			global = true
		}
	}
	if len(missing) > 0 {
		ex := make([]string, len(missing))
		for i, k := range missing {
			ex[i] = "--cardinality " + k + "=N"
		}
		notes = append(notes, "caps marked ? depend on how many distinct values these entries take; give "+
			strings.Join(ex, " ")+" or --trace FILE to compute them")
	}
	for _, r := range doc.Rules {
		if len(r.Overrides) > 0 && r.BucketsFrom == "cardinality" {
			notes = append(notes, "caps from --cardinality use each rule's own limit; overrides change it for the buckets they match (--trace sums each bucket's own limit)")
			break
		}
	}
	if !global && len(doc.Rules) > 0 {
		notes = append(notes, "every rule counts per key: nothing caps the service's total, which grows with the number of keys; add a rule with count_by: global to protect capacity")
	}
	if doc.Shadow {
		notes = append(notes, "the file turns on shadow mode for every rule: nothing is rejected")
	}
	if len(doc.Uncovered) > 0 {
		notes = append(notes, fmt.Sprintf("%d route(s) are covered by no rule: %s", len(doc.Uncovered), strings.Join(doc.Uncovered, ", ")))
	}
	return notes
}

// fmtDuration prints 1m rather than 1m0s, and - for none.
func fmtDuration(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return window.Format(d)
}

// printCheck writes doc as text: the rule table, then details, routes and
// notes.
func printCheck(w io.Writer, doc checkDoc) {
	if len(doc.Domains) > 1 {
		fmt.Fprintf(w, "%s: valid, %d rule(s) in domains %s\n", doc.File, len(doc.Rules), strings.Join(doc.Domains, ", "))
	} else {
		fmt.Fprintf(w, "%s: valid, %d rule(s) in domain %q (%s format)\n", doc.File, len(doc.Rules), doc.Domain, doc.Format)
	}
	if doc.Trace != "" {
		fmt.Fprintf(w, "buckets counted from %s (%d requests)\n", doc.Trace, doc.Requests)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tMATCHES\tCOUNT BY\tLIMIT\tALGORITHM\tBUCKETS\tEFFECTIVE CAP")
	for _, r := range doc.Rules {
		alg := r.Algorithm
		if alg == "" {
			alg = "-"
		}
		buckets := "?"
		if r.Buckets != nil {
			buckets = strconv.FormatInt(*r.Buckets, 10)
		}
		name := r.Name
		if len(doc.Domains) > 1 {
			name = r.Domain + "/" + r.Name
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, r.Match, r.Key, r.limitText(), alg, buckets, r.capText())
	}
	tw.Flush()
	printCheckDetails(w, doc.Rules)
	if len(doc.Routes) > 0 {
		fmt.Fprintln(w, "\nroutes:")
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		for _, r := range doc.Routes {
			covered := strings.Join(r.Rules, ", ")
			if covered == "" {
				covered = "NOT COVERED by any rule"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Method, r.Path, covered)
		}
		tw.Flush()
	}
	if len(doc.Notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range doc.Notes {
			fmt.Fprintln(w, "  - "+n)
		}
	}
}

// limitText is the rule's limit column: "N / window", unlimited or blocks.
func (r *checkRule) limitText() string {
	switch {
	case r.Unlimited:
		return "unlimited"
	case r.Block:
		return "0 (blocks)"
	}
	return fmt.Sprintf("%d / %s", r.Limit, r.Window)
}

// capText is the rule's effective cap column; without enough to compute it,
// the formula with the missing cardinalities.
func (r *checkRule) capText() string {
	switch {
	case r.Unlimited:
		return "unlimited"
	case r.Cap != nil && r.Buckets != nil && r.BucketsFrom == "trace" && *r.Buckets > 0 && *r.Cap != r.Limit**r.Buckets:
		return fmt.Sprintf("%d / %s (per-bucket limits summed)", *r.Cap, r.Window)
	case r.Cap != nil:
		return fmt.Sprintf("%d / %s", *r.Cap, r.Window)
	case r.BucketsFrom == "trace":
		return "unlimited (a traced bucket is unlimited)"
	}
	n := big.NewInt(r.Limit)
	if r.partial != nil {
		n = r.partial
	}
	return fmt.Sprintf("%s × buckets(%s)", n, strings.Join(r.Missing, "×"))
}

// printCheckDetails writes what the table leaves out of each rule: shadow,
// failure policy, cost and overrides.
func printCheckDetails(w io.Writer, rs []checkRule) {
	var details []string
	for _, r := range rs {
		var parts []string
		if r.Shadow {
			parts = append(parts, "shadow (reports, never rejects)")
		}
		if r.Failure != "open" {
			parts = append(parts, "fails "+r.Failure+" when the store is down")
		}
		if !strings.HasPrefix(r.Cost, "hits") {
			parts = append(parts, "cost "+r.Cost)
		}
		for _, o := range r.Overrides {
			parts = append(parts, "override "+o)
		}
		if len(parts) > 0 {
			details = append(details, fmt.Sprintf("  %s: %s", r.Name, strings.Join(parts, "; ")))
		}
	}
	if len(details) > 0 {
		fmt.Fprintln(w, "\ndetails:")
		for _, d := range details {
			fmt.Fprintln(w, d)
		}
	}
}
