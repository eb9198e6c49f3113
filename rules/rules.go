// Package rules maps requests to limits: it reads rule files, matches a
// request's descriptors against them, builds the key each limit counts by,
// and decides every applicable limit together in one store call.
//
// A request is described the way Envoy's Rate Limit Service describes it: a
// domain and a list of descriptors, each an ordered list of key/value
// entries such as client=acme, member=u4, path=/loan/list or
// header:x-api-key=k1. A rule names the entries it matches, the entries it
// counts by, and its limit. Several rules may apply to one request; the
// request passes only if every one of them passes, and a rejected request is
// counted by none of them.
//
// Two file formats are read: Floodgate's own (see docs/rules.md) and the
// configuration format of envoyproxy/ratelimit, so that its users can point
// Floodgate at the files they already have. Parse tells them apart; Load
// also takes a directory of such files, one domain each.
//
// An Engine holds the current rule Set, the store and the clock. Its rule set
// can be swapped at any time (package rules/reload does it when the file
// changes) without disturbing requests in flight; counters of rules that did
// not change survive the swap, because their keys and algorithm parameters
// are the same.
package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/store"
)

// Bounds are the largest rule files, requests and limits the engine
// accepts. Values past them are rejected with an error rather than
// truncated, hashed or allowed to overflow; a front end that builds a
// Request from its own wire format can refuse an oversized one before
// building it. Max returns them.
type Bounds struct {
	// Limit is the largest limit, capacity or cost a rule or request may
	// state: one below algorithm.MaxLimit, so that a cost above any limit
	// can always be expressed.
	Limit int64
	// Window is the longest window a rule or override may state.
	Window time.Duration
	// KeyLen is the longest descriptor entry key, in bytes.
	KeyLen int
	// ValueLen is the longest entry value a rule file may hold, in bytes.
	// Longer values in requests are counted by their SHA-256 digest.
	ValueLen int
	// Entries is the most entries one descriptor may hold.
	Entries int
	// Descriptors is the most descriptors one request may hold.
	Descriptors int
	// Rules is the most rules (or rate limits, in the envoyproxy/ratelimit
	// format) one file may hold.
	Rules int
	// FileSize is the largest rule file Parse reads, in bytes.
	FileSize int
	// Overrides is the most distinct Overrides (limit and window pairs) a
	// rule set keeps built at once, and OverrideBytes the most memory they
	// may take: a request with an Override the set does not hold evicts the
	// least recently used one when either is reached, and no request is
	// refused for it.
	Overrides, OverrideBytes int
}

// Max returns the bounds the engine enforces.
func Max() Bounds {
	return Bounds{
		Limit: maxLimit, Window: maxWindow, KeyLen: maxKeyLen, ValueLen: maxValueLen,
		Entries: maxDescriptorEntries, Descriptors: maxDescriptors, Rules: maxRules,
		FileSize: maxFileSize, Overrides: maxOverrides, OverrideBytes: maxOverrideBytes,
	}
}

// The bounds Max reports.
const (
	// maxLimit is the largest limit, capacity or cost a rule or request may
	// state: one below algorithm.MaxLimit, so that a cost above any limit can
	// always be expressed.
	maxLimit = algorithm.MaxLimit - 1
	// maxWindow is the longest window a rule may state.
	maxWindow = algorithm.MaxWindow
	// maxKeyLen is the longest descriptor entry key, in bytes.
	maxKeyLen = 128
	// maxValueLen is the longest entry value a rule file may hold, in bytes.
	// Longer values in requests are counted by their SHA-256 digest.
	maxValueLen = 1024
	// maxDescriptorEntries is the most entries one descriptor may hold.
	maxDescriptorEntries = 64
	// maxDescriptors is the most descriptors one request may hold.
	maxDescriptors = 64
	// maxRules is the most rules (or rate limits, in the envoyproxy/ratelimit
	// format) one file may hold.
	maxRules = 10000
	// maxFileSize is the largest rule file Parse reads, in bytes.
	maxFileSize = 8 << 20
)

// Entry is one descriptor entry, such as {"member", "u4"}. Request headers
// use the key "header:" followed by the header name in lower case, as in
// {"header:x-api-key", "k1"}.
type Entry struct {
	Key, Value string
}

// Descriptor is an ordered list of entries, as in Envoy's RLS API.
type Descriptor []Entry

// Get returns the value of the first entry with the given key, and whether
// there is one.
func (d Descriptor) Get(key string) (string, bool) {
	for _, e := range d {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Request is what a front end asks about one incoming request.
type Request struct {
	// Domain selects the rule set; empty means the set's own domain. A
	// request for a domain the set does not have matches no rule.
	Domain string
	// Descriptors are matched against the rules one by one.
	Descriptors []Descriptor
	// Hits is the request's weight for rules without a cost of their own;
	// 0 means 1.
	Hits int64
	// Overrides, when not empty, holds one Override per descriptor, in the
	// same order. A descriptor whose Override has a positive Window is
	// limited by it instead of by the rules (Envoy's per-descriptor limit
	// override); a zero Override leaves its descriptor to the rules.
	Overrides []Override
	// Usage is what the request used of a language model, for rules that
	// count money or tokens (cost: {usage: ...}; see TokenUsage). Zero
	// means none: such rules then count Hits.
	Usage TokenUsage
	// Peek asks whether allowance is left without counting anything: each
	// rule reports what a request of cost 1 would get, and Remaining is
	// what is left now. RLS asks it with a descriptor hits_addend of 0.
	Peek bool
}

// overrideRule is the rule name reported for a limit a request set with an
// Override.
const overrideRule = "limit-override"

// Override is a limit a request sets for one of its descriptors, as the
// limit field of Envoy's RateLimitDescriptor does. As in
// envoyproxy/ratelimit, it replaces every rule the descriptor would match
// (and applies when none does): the descriptor is limited to Limit
// requests per Window on the bounded-log algorithm, counted by all its
// entries, failing open, and in shadow mode only when the engine runs every
// rule in shadow mode. Limit 0 rejects every request. Its status reports
// the rule name limit-override. Descriptors with equal entries and equal
// overrides share a counter. A rule set keeps at most Max().Overrides
// distinct overrides built, evicting the least recently used; an evicted
// override keeps its counters.
type Override struct {
	Limit  int64
	Window time.Duration
}

// SetUnits sets o from Envoy's terms: requestsPerUnit per multiplier
// units: second, minute, hour, day, week, month (30 days) or year (365
// days), in any case. Its errors start with the name of the field that is
// wrong (requests_per_unit, unit, unit_multiplier), for the caller to
// prefix with where the field is; o is unchanged then.
func (o *Override) SetUnits(requestsPerUnit int64, unit string, multiplier int64) error {
	w, ok := unitWindow(unit)
	switch {
	case !ok:
		return fmt.Errorf("unit: %q is not second, minute, hour, day, week, month or year", unit)
	case requestsPerUnit < 0 || requestsPerUnit > maxLimit:
		return fmt.Errorf("requests_per_unit: %d is out of range 0..%d", requestsPerUnit, int64(maxLimit))
	case multiplier < 1 || multiplier > int64(maxWindow/w):
		return fmt.Errorf("unit_multiplier: %d %ss is not a window from 1 unit to %s",
			multiplier, strings.ToLower(unit), window.Format(maxWindow))
	}
	*o = Override{Limit: requestsPerUnit, Window: time.Duration(multiplier) * w}
	return nil
}

// Status is the outcome of one rule that applied to a request.
type Status struct {
	// Rule is the rule's name.
	Rule string
	// Descriptor is the index in Request.Descriptors of the descriptor the
	// rule matched.
	Descriptor int
	// Key is the counter key, for display (top keys); it is unbounded in
	// number, so it is no metric label.
	Key string
	// Limit and Window are the limit that applied, after overrides. Limit is
	// 0 for an unlimited rule and for a rule that blocks. A calendar rule's
	// Window is the length of the period the decision fell in, which
	// Calendar names ("month from the 15th in America/New_York").
	Limit    int64
	Window   time.Duration
	Calendar string
	// PeriodEnd is when the window the decision fell in ends, for a fixed
	// window or calendar rule (the count starts afresh then); zero for the
	// others, whose windows roll.
	PeriodEnd time.Time
	// Algorithm names the algorithm that decided; empty when no store was
	// asked (unlimited).
	Algorithm algorithm.Name
	// Unlimited reports a rule (or override) that lets every request through
	// without counting.
	Unlimited bool
	// Shadow reports that the rule's rejection did not reject the request.
	Shadow bool
	// Quota reports an envoyproxy/ratelimit quota_mode limit: its rejection
	// rejects the request only when every quota limit applied rejected.
	Quota bool
	// LimitName is the name an RLS answer reports as current_limit.name:
	// the rule's name, or in the envoyproxy/ratelimit format the
	// rate_limit's name (empty when it has none; Rule then holds the path).
	LimitName string
	// Decision is the rule's decision.
	Decision algorithm.Decision
	// Detail says more than Decision.Reason's message when there is more
	// to say (which cost entry could not be read); usually empty.
	Detail string
	// Failure is the rule's failure policy (what a lease holder applies
	// when it can no longer reach the server).
	Failure store.FailurePolicy
	// Used is the units the rule counts for the key after this call: the
	// decision's limit less what remains, or, where the call read the
	// key's state (a charge, a usage query) and the algorithm counts units
	// (the windows), the count itself, above the limit when the key
	// overspent. 0 for an unlimited or blocking rule.
	Used int64
	// Warning reports that the units the rule counts for the key reach its
	// warning level (warn_at, a fraction of Decision.Limit); always false
	// for a rule without one.
	Warning bool
	// CrossedWarning reports that this call's own units took the key from
	// below the warning level to it: the one call per crossing that logs
	// and metrics count.
	CrossedWarning bool
	// WarnAt is the rule's warning level, a fraction of the limit; 0 for
	// none.
	WarnAt float64
}

// Message is the sentence that explains a rejection to people: Detail when
// there is one, else the message of Decision.Reason.
func (s Status) Message() string {
	if s.Detail != "" {
		return s.Detail
	}
	return s.Decision.Reason.Message()
}

// Result is the outcome of Engine.Check.
type Result struct {
	// Allowed is false if any rule that is not in shadow mode rejected.
	Allowed bool
	// Statuses holds every rule that applied, in rule-file order.
	Statuses []Status
	// Rejected names the rules that rejected, shadow ones included (their
	// Status.Shadow tells them apart), each name once.
	Rejected []string
	// Tightest is the index in Statuses of the most restrictive status: the
	// rejecting one with the longest RetryAfter, or else the one with the
	// least remaining allowance relative to its limit. Shadow statuses count
	// only when every status is a shadow one. It is -1 when no limited rule
	// applied.
	Tightest int
	// Unlimited reports that rules applied and all of them were unlimited.
	Unlimited bool
	// Unmatched is set when no rule applied, so the request passed without
	// being limited: UnmatchedDomain when no rule set has the request's
	// domain, UnmatchedRules when the domain's rules match none of its
	// descriptors. It is empty when some rule (or override) applied.
	Unmatched string
	// Domain is the rule set's domain an unmatched request was checked in;
	// empty for UnmatchedDomain. It is set only with Unmatched.
	Domain string
	// Lease names what an allowed request holds under concurrency rules:
	// give it to Engine.Release, with the same request, when the request
	// ends. Only its holder can release those units; unreleased, they come
	// back when the lease expires (the rule's window, else a minute). It is
	// empty when no concurrency rule counted the request, and when the
	// store holds no leases (see store.Leaser); such units come back only
	// when the key goes idle.
	Lease string
	// NoLease, in an answer of Engine.Hold, says why the request gets no
	// quota lease (it was then decided as Check decides it); empty when it
	// does.
	NoLease string
}

// RuleInfo describes one rule for listings: GET /v1/rules, the status page,
// and floodgate check.
type RuleInfo struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
	// Match says which descriptors the rule applies to, e.g.
	// "path prefix /loan/, member any".
	Match string `json:"match"`
	// CountBy lists the entry keys the rule counts by (for an
	// envoyproxy/ratelimit limit, the entries of its path not fixed to one
	// value); empty means one bucket for everything (global).
	CountBy []string `json:"count_by"`
	// Key describes the counter key, e.g. "member" or "global".
	Key   string `json:"key"`
	Limit int64  `json:"limit"`
	// Window is written in JSON twice: as in rule files ("window": "1m",
	// empty for none) and in seconds ("window_seconds": 60).
	Window time.Duration `json:"-"`
	// Calendar describes a calendar rule's period (then Window is zero),
	// e.g. "month from the 15th in America/New_York".
	Calendar  string         `json:"calendar,omitempty"`
	Algorithm algorithm.Name `json:"algorithm"`
	Unlimited bool           `json:"unlimited"`
	// Block reports a rule that rejects every request it applies to (limit 0).
	Block  bool `json:"block"`
	Shadow bool `json:"shadow"`
	// Failure is the failure policy's name: open, closed or local.
	Failure string `json:"failure"`
	// ChargeAfterResponse reports a budget charged after the response
	// (charge_after_response: true).
	ChargeAfterResponse bool `json:"charge_after_response,omitempty"`
	// Cost describes the cost of a request, e.g. "1" or "header:x-tokens
	// (default 1)".
	Cost string `json:"cost"`
	// WarnAt is the rule's warning level, a fraction of its limit (warn_at);
	// 0 for none.
	WarnAt float64 `json:"warn_at,omitempty"`
	// Overrides describes the overrides, one line each.
	Overrides []string `json:"overrides"`
	// Line is the rule's line in its file.
	Line int `json:"line"`
}

// MarshalJSON writes the one JSON view of a rule that every listing uses
// (GET /v1/rules, the status page): the fields above with their JSON names,
// lists never null, and the window as in rule files and in seconds.
func (ri RuleInfo) MarshalJSON() ([]byte, error) {
	type plain RuleInfo
	p := plain(ri)
	if p.CountBy == nil {
		p.CountBy = []string{}
	}
	if p.Overrides == nil {
		p.Overrides = []string{}
	}
	text := ""
	if ri.Window > 0 {
		text = window.Format(ri.Window)
	}
	return json.Marshal(struct {
		plain
		Window        string  `json:"window"`
		WindowSeconds float64 `json:"window_seconds"`
	}{p, text, ri.Window.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON writes, the window from
// window_seconds.
func (ri *RuleInfo) UnmarshalJSON(b []byte) error {
	type plain RuleInfo
	var v struct {
		plain
		WindowSeconds float64 `json:"window_seconds"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*ri = RuleInfo(v.plain)
	ri.Window = time.Duration(math.Round(v.WindowSeconds * float64(time.Second)))
	return nil
}
