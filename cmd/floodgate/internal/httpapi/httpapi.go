// Package httpapi is Floodgate's JSON API over HTTP:
//
//	POST /v1/check   decide a request: {"domain", "descriptors", "hits", "peek", "usage"}
//	POST /v1/charge  count a cost known after the response (charge.go)
//	POST /v1/release give back what a request held under concurrency rules
//	POST /v1/usage   what keys have used and have left, counting nothing (usage.go)
//	GET  /v1/rules   the rules in force
//
// A check is
//
//	{"domain": "edge", "descriptors": [{"entries": [{"key": "client", "value": "acme"}]}], "hits": 1}
//
// where domain may be left out (the rule set's own domain), hits may be
// left out or 0 (meaning 1), and there is at least one descriptor. The
// answer is 200 with the decision and the status of every rule that
// applied (see CheckResponse), whether or not the request is over the
// limit. Errors are JSON objects {"error": "..."}: 400 for a malformed or
// out-of-bounds request (a body that is not valid UTF-8 included: JSON
// would merge different bytes into U+FFFD), 405 for a wrong method, 413 for
// a body larger than the limit, 415 for a body not sent as
// Content-Type: application/json, 503 when the limiter could not decide. Values longer than
// rules.Max().ValueLen are accepted (the engine counts them by digest).
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/window"
	"github.com/floodgate-dev/floodgate/rules"
)

// Engine decides requests and tells the rules in force. *rules.Engine
// implements it.
type Engine interface {
	Check(ctx context.Context, req rules.Request) (rules.Result, error)
	Set() *rules.Set
}

// DefaultMaxBodyBytes is the request body limit when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 64 << 10

// Options configures the API.
type Options struct {
	// Engine decides; required.
	Engine Engine
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
	// Shadow reports that the engine runs every rule in shadow mode (the
	// server's global switch), so /v1/rules shows every rule as shadow.
	Shadow bool
	// Overrides is what the API does with a descriptor's own limit. The
	// zero value applies it; the server refuses it unless configured to
	// (http.limit_overrides), since any caller could raise its own limit.
	Overrides rules.OverridePolicy
}

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Domain      string       `json:"domain"`
	Descriptors []Descriptor `json:"descriptors"`
	// Hits is left out when 0 (which means 1), so a plain request is also
	// a valid envoyproxy/ratelimit POST /json body.
	Hits int64 `json:"hits,omitempty"`
	// Peek checks without counting: see rules.Request.Peek.
	Peek bool `json:"peek,omitempty"`
	// Lease, in a /v1/release body only, is the lease the answer to the
	// check carried.
	Lease string `json:"lease,omitempty"`
	// Usage is what the request used of a language model, for rules that
	// count money or tokens (cost: {usage: ...}); see rules.TokenUsage.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is a request's use of a language model: the model (priced in the
// rule file) and its token counts. input_tokens are those not read from
// the provider's cache, cached_input_tokens those read from it.
type Usage struct {
	Model             string `json:"model"`
	InputTokens       int64  `json:"input_tokens,omitempty"`
	OutputTokens      int64  `json:"output_tokens,omitempty"`
	CachedInputTokens int64  `json:"cached_input_tokens,omitempty"`
}

// Descriptor is one descriptor of a CheckRequest.
type Descriptor struct {
	Entries []Entry `json:"entries"`
	// Limit, when set, limits this descriptor instead of the rules, as
	// Envoy's per-descriptor limit override does (see rules.Override).
	Limit *LimitOverride `json:"limit,omitempty"`
}

// LimitOverride is a descriptor's own limit, in the terms of Envoy's
// RateLimitDescriptor.limit: requests_per_unit per unit_multiplier units.
type LimitOverride struct {
	RequestsPerUnit int64 `json:"requests_per_unit"`
	// Unit is second, minute, hour, day, week, month (30 days) or year
	// (365 days), as in envoyproxy/ratelimit files.
	Unit string `json:"unit"`
	// UnitMultiplier is the number of units in the window; 0 means 1.
	UnitMultiplier int64 `json:"unit_multiplier,omitempty"`
}

// override converts l, naming it by where in the request it is in errors.
func (l *LimitOverride) override(where string) (rules.Override, error) {
	mult := l.UnitMultiplier
	if mult == 0 {
		mult = 1
	}
	var o rules.Override
	if err := o.SetUnits(l.RequestsPerUnit, l.Unit, mult); err != nil {
		return o, fmt.Errorf("%s.%v", where, err)
	}
	return o, nil
}

// Entry is one descriptor entry.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CheckResponse is the answer to POST /v1/check.
type CheckResponse struct {
	// Allowed is false when a rule that is not in shadow mode rejected.
	Allowed bool `json:"allowed"`
	// Code is "OK" or "OVER_LIMIT", as in Envoy's RLS.
	Code string `json:"code"`
	// Rejected names every rule that rejected, shadow ones included.
	Rejected []string `json:"rejected"`
	// Tightest names the most restrictive rule; empty when none applied.
	Tightest string `json:"tightest,omitempty"`
	// Unlimited is true when only unlimited rules applied.
	Unlimited bool `json:"unlimited"`
	// RetryAfter is the number of seconds to wait before retrying, rounded
	// up; 0 when allowed.
	RetryAfter int64 `json:"retry_after"`
	// Statuses holds every rule that applied, in rule order.
	Statuses []Status `json:"statuses"`
	// Unmatched is set when no rule applied, so the request was not
	// limited: "domain" when no rule set has the request's domain, "rules"
	// when the domain's rules match none of its descriptors. It is left out
	// when a rule applied.
	Unmatched string `json:"unmatched,omitempty"`
	// Note explains Unmatched in words.
	Note string `json:"note,omitempty"`
	// Lease is set when concurrency rules hold units for the request:
	// send it, with the same descriptors, to /v1/release when the request
	// ends. Unreleased, the units come back when the lease expires.
	Lease string `json:"lease,omitempty"`
	// Warning is true when a rule that is not in shadow mode is in warning
	// (its warn_at level reached); the RateLimit-Warning header names them.
	Warning bool `json:"warning,omitempty"`
}

// Status is one rule's part in a decision.
type Status struct {
	Rule          string  `json:"rule"`
	Descriptor    int     `json:"descriptor"`
	Key           string  `json:"key"`
	Limit         int64   `json:"limit"`
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"window_seconds"`
	// Calendar names a calendar rule's period; its window is then the
	// length of the period the decision fell in.
	Calendar     string `json:"calendar,omitempty"`
	Algorithm    string `json:"algorithm"`
	Shadow       bool   `json:"shadow"`
	Unlimited    bool   `json:"unlimited"`
	Allowed      bool   `json:"allowed"`
	Used         int64  `json:"used"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	// PeriodEnd is when a fixed window's or calendar period's count starts
	// afresh (RFC 3339, UTC); left out for rolling windows.
	PeriodEnd string `json:"period_end,omitempty"`
	// WarnAt is the rule's warning level (a fraction of the limit) and
	// Warning whether the key has reached it; both left out for a rule
	// without one.
	WarnAt  float64 `json:"warn_at,omitempty"`
	Warning bool    `json:"warning,omitempty"`
	// Reason is why the rule rejected, one of algorithm's Reason constants
	// (over_limit, cost_over_limit, queue_full, bad_cost, blocked,
	// store_unavailable); Message says the same for people.
	Reason  algorithm.Reason `json:"reason,omitempty"`
	Message string           `json:"message,omitempty"`
}

// RulesResponse is the answer to GET /v1/rules.
type RulesResponse struct {
	Domain string           `json:"domain"`
	File   string           `json:"file"`
	Format string           `json:"format"`
	Shadow bool             `json:"shadow"`
	Rules  []rules.RuleInfo `json:"rules"`
}

type api struct {
	o Options
}

// New returns the API's handler. It serves /v1/check and /v1/rules and
// answers 404 with a JSON error for other paths.
func New(o Options) (http.Handler, error) {
	if o.Engine == nil {
		return nil, errors.New("httpapi: Options.Engine is nil")
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &api{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", a.check)
	mux.HandleFunc("/v1/rules", a.rules)
	a.handleSettle(mux) // charge.go
	a.handleUsage(mux)  // usage.go
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		Error(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s: the API has POST /v1/check, /v1/charge, /v1/release, /v1/usage and GET /v1/rules", r.URL.Path))
	})
	return mux, nil
}

// Error writes {"error": msg} with the status code.
func Error(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (a *api) check(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		Error(w, http.StatusMethodNotAllowed, "use POST for /v1/check")
		return
	}
	data, berr := readJSONBody(w, r, a.o.MaxBodyBytes, JSONOnly)
	if berr != nil {
		Error(w, berr.code, berr.msg)
		return
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var in CheckRequest
	if err := dec.Decode(&in); err != nil {
		Error(w, http.StatusBadRequest, "malformed check request: "+err.Error())
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		Error(w, http.StatusBadRequest, "malformed check request: data after the JSON object")
		return
	}
	req, err := in.toRequest()
	if err == nil {
		err = a.o.Overrides.Apply(&req)
	}
	if err == nil && in.Lease != "" {
		err = errors.New("lease: only /v1/release takes a lease")
	}
	if err != nil {
		Error(w, http.StatusBadRequest, err.Error())
		return
	}
	res, err := a.o.Engine.Check(r.Context(), req)
	if errors.Is(err, rules.ErrInvalidRequest) {
		Error(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		a.o.Logger.Warn("httpapi: check failed", "err", err)
		Error(w, http.StatusServiceUnavailable, "the limiter could not decide: "+err.Error())
		return
	}
	out := NewCheckResponse(res)
	finishCheck(w.Header(), &out, res, a.o.Engine.Set())
	writeJSON(w, http.StatusOK, out)
}

// toRequest checks the request against the engine's bounds and converts it.
func (in *CheckRequest) toRequest() (rules.Request, error) {
	if len(in.Descriptors) == 0 {
		return rules.Request{}, errors.New(`descriptors: give at least one, e.g. {"entries":[{"key":"client","value":"acme"}]}`)
	}
	if len(in.Descriptors) > rules.Max().Descriptors {
		return rules.Request{}, fmt.Errorf("descriptors: %d given, the most is %d", len(in.Descriptors), rules.Max().Descriptors)
	}
	if in.Hits < 0 || in.Hits > rules.Max().Limit {
		return rules.Request{}, fmt.Errorf("hits: %d is out of range 0..%d (0 means 1)", in.Hits, rules.Max().Limit)
	}
	req := rules.Request{Domain: in.Domain, Hits: in.Hits, Peek: in.Peek, Descriptors: make([]rules.Descriptor, len(in.Descriptors))}
	if u := in.Usage; u != nil {
		req.Usage = rules.TokenUsage{Model: u.Model, InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedInputTokens: u.CachedInputTokens}
	}
	for i, d := range in.Descriptors {
		if len(d.Entries) == 0 {
			return rules.Request{}, fmt.Errorf("descriptors[%d]: no entries", i)
		}
		if len(d.Entries) > rules.Max().Entries {
			return rules.Request{}, fmt.Errorf("descriptors[%d]: %d entries, the most is %d", i, len(d.Entries), rules.Max().Entries)
		}
		rd := make(rules.Descriptor, len(d.Entries))
		for j, e := range d.Entries {
			switch {
			case e.Key == "":
				return rules.Request{}, fmt.Errorf("descriptors[%d].entries[%d]: key is empty", i, j)
			case len(e.Key) > rules.Max().KeyLen:
				return rules.Request{}, fmt.Errorf("descriptors[%d].entries[%d]: key is %d bytes, the most is %d", i, j, len(e.Key), rules.Max().KeyLen)
			}
			rd[j] = rules.Entry{Key: e.Key, Value: e.Value}
		}
		req.Descriptors[i] = rd
		if d.Limit != nil {
			o, err := d.Limit.override(fmt.Sprintf("descriptors[%d].limit", i))
			if err != nil {
				return rules.Request{}, err
			}
			if req.Overrides == nil {
				req.Overrides = make([]rules.Override, len(in.Descriptors))
			}
			req.Overrides[i] = o
		}
	}
	return req, nil
}

// NewCheckResponse renders a decision.
func NewCheckResponse(res rules.Result) CheckResponse {
	out := CheckResponse{
		Allowed:   res.Allowed,
		Code:      "OK",
		Rejected:  res.Rejected,
		Unlimited: res.Unlimited,
		Statuses:  make([]Status, len(res.Statuses)),
		Lease:     res.Lease,
		Warning:   res.Warning(),
	}
	if out.Rejected == nil {
		out.Rejected = []string{}
	}
	if !res.Allowed {
		out.Code = "OVER_LIMIT"
	}
	if res.Tightest >= 0 && res.Tightest < len(res.Statuses) {
		out.Tightest = res.Statuses[res.Tightest].Rule
	}
	var retry time.Duration
	for i, s := range res.Statuses {
		out.Statuses[i] = Status{
			Rule:          s.Rule,
			Descriptor:    s.Descriptor,
			Key:           s.Key,
			Limit:         s.Limit,
			Window:        window.Format(s.Window),
			WindowSeconds: s.Window.Seconds(),
			Calendar:      s.Calendar,
			Algorithm:     string(s.Algorithm),
			Shadow:        s.Shadow,
			Unlimited:     s.Unlimited,
			Allowed:       s.Decision.Allowed,
			Used:          s.Used,
			Remaining:     s.Decision.Remaining,
			ResetAfterMS:  s.Decision.ResetAfter.Milliseconds(),
			RetryAfterMS:  s.Decision.RetryAfter.Milliseconds(),
			DelayMS:       s.Decision.Delay.Milliseconds(),
			Reason:        s.Decision.Reason,
			Message:       s.Message(),
			WarnAt:        s.WarnAt,
			Warning:       s.Warning,
		}
		if !s.PeriodEnd.IsZero() {
			out.Statuses[i].PeriodEnd = s.PeriodEnd.UTC().Format(time.RFC3339Nano)
		}
		if !res.Allowed && !s.Shadow && !s.Decision.Allowed && s.Decision.RetryAfter > retry {
			retry = s.Decision.RetryAfter
		}
	}
	if !res.Allowed {
		out.RetryAfter = max(1, int64((retry+time.Second-1)/time.Second))
	}
	return out
}

func (a *api) rules(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		Error(w, http.StatusMethodNotAllowed, "use GET for /v1/rules")
		return
	}
	out := NewRulesResponse(a.o.Engine.Set())
	if a.o.Shadow {
		out.Shadow = true
		for i := range out.Rules {
			out.Rules[i].Shadow = true
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// NewRulesResponse describes a rule set.
func NewRulesResponse(set *rules.Set) RulesResponse {
	return RulesResponse{Domain: set.Domain(), File: set.File(), Format: set.Format(), Shadow: set.Shadow(), Rules: set.Rules()}
}
