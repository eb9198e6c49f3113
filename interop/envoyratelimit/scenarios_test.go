package envoyratelimit

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The requests of the differential test are generated from each config's
// descriptors, read here with the reference's documented fields only.

type yamlRoot struct {
	Domain      string     `yaml:"domain"`
	Descriptors []yamlDesc `yaml:"descriptors"`
}

type yamlDesc struct {
	Key         string     `yaml:"key"`
	Value       string     `yaml:"value"`
	RateLimit   *yamlLimit `yaml:"rate_limit"`
	Descriptors []yamlDesc `yaml:"descriptors"`
	QuotaMode   bool       `yaml:"quota_mode"`
}

type yamlLimit struct {
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
}

// target is one node of a config's descriptor tree that a request can
// reach: the entries leading to it (a value "" matches any value of the
// key; a value with '*' is a wildcard) and its limit (nil: none here).
type target struct {
	domain  string
	entries [][2]string
	limit   *yamlLimit
	quota   bool // quota_mode
}

// limited reports whether the target has a finite limit, and which.
func (t target) limited() (uint32, bool) {
	if t.limit == nil || t.limit.Unlimited {
		return 0, false
	}
	return t.limit.RequestsPerUnit, true
}

// descriptor builds a request descriptor reaching t, filling free values
// and wildcards with variant.
func (t target) descriptor(variant string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for _, e := range t.entries {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: instance(e[1], variant)})
	}
	return d
}

// free reports whether some entry of t takes more than one value (no value
// or a wildcard), so two variants reach the same node.
func (t target) free() bool {
	for _, e := range t.entries {
		if e[1] == "" || strings.Contains(e[1], "*") {
			return true
		}
	}
	return false
}

func instance(pattern, variant string) string {
	switch {
	case pattern == "":
		return "v-" + variant
	case strings.Contains(pattern, "*"):
		return strings.ReplaceAll(pattern, "*", variant)
	}
	return pattern
}

// targets lists every node of the file's descriptor tree, in file order.
func targets(t testing.TB, f configFile) (string, []target) {
	t.Helper()
	var root yamlRoot
	if err := yaml.Unmarshal([]byte(f.text), &root); err != nil {
		t.Fatalf("%s: %v", f.origin, err)
	}
	var out []target
	var walk func(path [][2]string, ds []yamlDesc)
	walk = func(path [][2]string, ds []yamlDesc) {
		for _, d := range ds {
			p := append(append([][2]string(nil), path...), [2]string{d.Key, d.Value})
			out = append(out, target{domain: root.Domain, entries: p, limit: d.RateLimit, quota: d.QuotaMode})
			walk(p, d.Descriptors)
		}
	}
	walk(nil, root.Descriptors)
	return root.Domain, out
}

// step is one request of a scenario: an RLS request (sent over gRPC or
// as POST /json), or a raw POST /json.
type step struct {
	label string
	req   *pb.RateLimitRequest
	post  *rawPost
}

// rawPost is a POST /json body sent as it is, with its Content-Type ("":
// none).
type rawPost struct{ body, contentType string }

func (s step) String() string {
	if s.post != nil {
		return s.post.body + " (Content-Type: " + s.post.contentType + ")"
	}
	return compact(s.req)
}

// scenario is a sequence of requests sent in turn to each server, starting
// from empty counters; unitSeconds is the shortest window it involves (a
// run that crosses one of its boundaries is run again).
type scenario struct {
	kind        string
	name        string
	unitSeconds int64
	steps       []step
}

func request(domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits}
}

// withHits returns d with its own hits_addend set.
func withHits(d *rlv3.RateLimitDescriptor, hits uint64) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: d.Entries, HitsAddend: wrapperspb.UInt64(hits)}
}

var unitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

func (t target) unitSeconds() int64 {
	if t.limit == nil {
		return 0
	}
	return unitSeconds[strings.ToLower(t.limit.Unit)]
}

func (t target) String() string {
	var parts []string
	for _, e := range t.entries {
		parts = append(parts, e[0]+"="+e[1])
	}
	return strings.Join(parts, ",")
}

// scenarios generates the requests for one config file: per node a
// sequence through its limit (hits_addend 1, 0 on the descriptor, a fill
// to exactly the limit, 0 at the limit, over it, 25), two values of a
// wildcard or free entry, the descriptor twice in one request, a value
// that does not match, an extra entry, and per domain every node in one
// request, an unknown domain, an empty key, an empty value, no
// descriptors and an empty domain.
func scenarios(t testing.TB, f configFile) []scenario {
	t.Helper()
	domain, ts := targets(t, f)
	var out []scenario
	add := func(kind string, tg target, steps ...step) {
		out = append(out, scenario{kind: kind, name: kind + " " + tg.String(), unitSeconds: tg.unitSeconds(), steps: steps})
	}
	var all []*rlv3.RateLimitDescriptor
	var shortest int64
	for _, tg := range ts {
		d := tg.descriptor("a1")
		all = append(all, d)
		if u := tg.unitSeconds(); u > 0 && (shortest == 0 || u < shortest) {
			shortest = u
		}
		limit, limited := tg.limited()
		seq := []step{
			{label: "hits 1", req: request(domain, 1, d)},
			{label: "descriptor hits 0", req: request(domain, 1, withHits(d, 0))},
		}
		if limited && limit > 2 {
			seq = append(seq, step{label: fmt.Sprintf("hits %d (to one below the limit)", limit-2), req: request(domain, limit-2, d)})
		}
		seq = append(seq,
			step{label: "hits 1 (at the limit)", req: request(domain, 1, d)},
			step{label: "descriptor hits 0 at the limit", req: request(domain, 1, withHits(d, 0))},
			step{label: "hits 1 (over)", req: request(domain, 1, d)},
			step{label: "hits 25", req: request(domain, 25, d)},
			step{label: "descriptor hits 1", req: request(domain, 0, withHits(d, 1))},
		)
		add("sequence", tg, seq...)
		if tg.free() {
			fill := uint32(1)
			if limited && limit > 0 {
				fill = limit
			}
			add("two values", tg,
				step{label: fmt.Sprintf("value a1 hits %d", fill), req: request(domain, fill, d)},
				step{label: "value b2 hits 1", req: request(domain, 1, tg.descriptor("b2"))},
				step{label: "value a1 hits 1", req: request(domain, 1, d)},
			)
		}
		add("duplicate", tg,
			step{label: "twice, hits 1", req: request(domain, 1, d, d)},
			step{label: "twice, hits 1", req: request(domain, 1, d, d)},
			step{label: "twice, hits 1", req: request(domain, 1, d, d)},
		)
		if last := tg.entries[len(tg.entries)-1]; last[1] != "" {
			other := tg.descriptor("a1")
			other.Entries[len(other.Entries)-1].Value = "zz-other"
			add("value not matching", tg, step{label: "hits 1", req: request(domain, 1, other)})
		}
		extra := tg.descriptor("a1")
		extra.Entries = append(extra.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "zz-extra", Value: "1"})
		add("extra entry", tg, step{label: "hits 1", req: request(domain, 1, extra)}, step{label: "hits 1", req: request(domain, 1, extra)})
		if limited && limit < 25 {
			add("hits 25 first", tg, step{label: "hits 25", req: request(domain, 25, d)}, step{label: "hits 1", req: request(domain, 1, d)})
		}
	}
	out = append(out, quotaScenarios(domain, ts)...)
	first := &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "zz-none", Value: "1"}}}
	firstKey := "zz-none"
	if len(all) > 0 {
		first, firstKey = all[0], all[0].Entries[0].Key
	}
	out = append(out,
		scenario{kind: "every node at once", name: "every node at once", unitSeconds: shortest, steps: []step{
			{label: "hits 1", req: request(domain, 1, all...)}, {label: "hits 1", req: request(domain, 1, all...)}}},
		scenario{kind: "unknown domain", name: "unknown domain", steps: []step{{label: "hits 1", req: request("zz-unknown-domain", 1, first)}}},
		scenario{kind: "empty key", name: "empty key", steps: []step{{label: "hits 1", req: request(domain, 1,
			&rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "", Value: "x"}}})}}},
		scenario{kind: "empty value", name: "empty value", steps: []step{{label: "hits 1", req: request(domain, 1,
			&rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: firstKey, Value: ""}}})}}},
		scenario{kind: "no descriptors", name: "no descriptors", steps: []step{{label: "hits 1", req: request(domain, 1)}}},
		scenario{kind: "empty domain", name: "empty domain", steps: []step{{label: "hits 1", req: request("", 1, first)}}},
	)
	return out
}

// quotaScenarios sends the quota_mode limits of a file together, as Envoy
// does for a route with one rate limit per quota (the reference's
// integration-test quota.sh): hits 1 until every one is over, so that the
// answer goes from OK (some over) to OVER_LIMIT (all over); then with a
// limit without quota_mode added, over at once.
func quotaScenarios(domain string, ts []target) []scenario {
	var quota []*rlv3.RateLimitDescriptor
	var most uint32
	var shortest int64
	for _, tg := range ts {
		if l, ok := tg.limited(); ok && tg.quota {
			quota = append(quota, tg.descriptor("q1"))
			most = max(most, l)
			if u := tg.unitSeconds(); shortest == 0 || u < shortest {
				shortest = u
			}
		}
	}
	if len(quota) < 2 {
		return nil
	}
	sc := scenario{kind: "quota together", name: fmt.Sprintf("%d quota limits together", len(quota)), unitSeconds: shortest}
	for i := uint32(0); i < most+2; i++ {
		sc.steps = append(sc.steps, step{label: fmt.Sprintf("hits 1 (%d)", i+1), req: request(domain, 1, quota...)})
	}
	zero := make([]*rlv3.RateLimitDescriptor, len(quota))
	for i, d := range quota {
		zero[i] = withHits(d, 0)
	}
	sc.steps = append(sc.steps, step{label: "descriptor hits 0, all over", req: request(domain, 1, zero...)})
	return []scenario{sc}
}
