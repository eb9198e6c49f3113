// Package rls serves Envoy's Rate Limit Service v3
// (envoy.service.ratelimit.v3.RateLimitService) over gRPC, deciding with the
// rule engine, so an Envoy proxy (or any RLS client) can ask Floodgate
// whether a request should be rate limited.
//
// Each RateLimitRequest becomes one rules.Request: its domain, its
// descriptors in order, and hits_addend as the request's hits (0 means 1).
// A descriptor with its own hits_addend is decided with that weight; a
// descriptor hits_addend of 0 (set, unlike the request's, only on purpose)
// checks without counting: its status says whether allowance is left.
//
// Budgets charged after the response follow Envoy's AI gateway: the
// request-time call carries descriptor hits_addend 0 (a check), and the
// call Envoy makes when the stream is done (apply_on_stream_done) carries
// the same descriptors with the cost as hits_addend. Both calls look alike
// on the wire, so the rule says which is which: a rule with
// charge_after_response: true counts any non-zero addend as a charge, even
// past its limit, and never rejects it (see rules.Engine.Charge). Give
// the budget's descriptors an entry of their own so that ordinary rules do
// not also count the stream-done call. The
// response has one DescriptorStatus per descriptor, in order; overall_code
// is OVER_LIMIT when any descriptor is over its limit and OK otherwise,
// never UNKNOWN.
//
// A descriptor's status reports its most restrictive rule (shadow rules
// only when nothing else applied): current_limit names the rule and states
// its limit per unit of time, limit_remaining and duration_until_reset come
// from the rule's decision. RLS expresses a window as a unit (second,
// minute, hour, day, week, month, year) times an optional unit_multiplier;
// see Unit for how a window that is not a whole number of units is
// expressed. Concurrency rules have no window; their status carries the
// remaining count and no current_limit. A descriptor that no rule limits
// is OK with no current_limit.
//
// current_limit.name is the rule's name; for a limit from an
// envoyproxy/ratelimit file it is the rate_limit's name, empty when it has
// none (logs and metrics name it by its path). A descriptor only an
// unlimited rule applies to is OK with limit_remaining 4294967295. The same
// descriptor twice in one request is counted once, and both statuses carry
// the limit.
//
// With WithHeaders the response also carries, in response_headers_to_add,
// the RateLimit header fields package ratelimitheader writes (X-RateLimit-*,
// RateLimit-Policy, RateLimit, and Retry-After when over the limit), so
// Envoy can pass them to the client. Without it (the default, as in
// envoyproxy/ratelimit) it carries none: Envoy adds its own from the
// statuses when asked to.
package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/ruleheader"
	"github.com/floodgate-dev/floodgate/rules/rulelog"
)

// Checker decides requests against a rule set. *rules.Engine implements it.
type Checker interface {
	Check(ctx context.Context, req rules.Request) (rules.Result, error)
}

// Service implements RateLimitServiceServer.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	checker   Checker
	log       *slog.Logger
	shadow    *rulelog.Shadow
	headers   bool
	overrides rules.OverridePolicy
	// maxDescs and maxEntries bound a request's descriptors and a
	// descriptor's entries.
	maxDescs, maxEntries int
}

// WithOverrides sets what the service does with descriptor limit
// overrides (RateLimitDescriptor.limit). The default, rules.OverridesAllow,
// applies them, as envoyproxy/ratelimit does: Envoy sets them from its
// route configuration. Under rules.OverridesReject a request with one is
// INVALID_ARGUMENT; under rules.OverridesIgnore the rules decide it.
func WithOverrides(p rules.OverridePolicy) Option {
	return func(s *Service) { s.overrides = p }
}

// Option configures a Service.
type Option func(*Service)

// WithMaxDescriptors bounds the descriptors of one request, and the
// entries of one descriptor: a request past either is INVALID_ARGUMENT,
// saying which bound, before any work is done for it. They can only lower
// the rule engine's own bounds, rules.Max().Descriptors and .Entries,
// which are the defaults; 0, or a value above them, keeps them.
func WithMaxDescriptors(descriptors, entries int) Option {
	return func(s *Service) {
		if descriptors > 0 {
			s.maxDescs = min(descriptors, rules.Max().Descriptors)
		}
		if entries > 0 {
			s.maxEntries = min(entries, rules.Max().Entries)
		}
	}
}

// WithHeaders makes every response carry the RateLimit header fields in
// response_headers_to_add.
func WithHeaders() Option { return func(s *Service) { s.headers = true } }

// UnmatchedHeader is the gRPC response header set when no rule applied to
// a request, so it was not limited: its value is rules.UnmatchedDomain (no
// rule set has the domain) or rules.UnmatchedRules (no rule of the domain
// matches the descriptors). The response itself is unchanged.
const UnmatchedHeader = "floodgate-unmatched"

// LeaseHeader is the gRPC response header that carries the lease under
// which concurrency rules hold an allowed request's units
// (rules.Result.Lease), for clients that release it through the JSON API
// (POST /v1/release), as rlsclient does. Envoy ignores it; its units come
// back when the lease expires. A request whose descriptors carry different
// hits_addend values is decided in several checks and gets no lease.
const LeaseHeader = "floodgate-lease"

// New returns a Service that decides with c and logs to log (nil means
// slog.Default()).
func New(c Checker, log *slog.Logger, opts ...Option) *Service {
	if log == nil {
		log = slog.Default()
	}
	s := &Service{checker: c, log: log, shadow: rulelog.NewShadow(log, time.Second),
		maxDescs: rules.Max().Descriptors, maxEntries: rules.Max().Entries}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register registers s on g.
func (s *Service) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// ShouldRateLimit decides one request. An empty domain, a request without
// descriptors, a descriptor entry with an empty key, a request with more
// descriptors, or a descriptor with more entries, than the service allows
// (WithMaxDescriptors), or a request past the rule engine's other bounds
// (rules.Max().KeyLen, ...) is INVALID_ARGUMENT; a failure to decide is
// UNAVAILABLE.
func (s *Service) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if in.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "domain is empty: set the rate limit domain the rules are written for")
	}
	descs := in.GetDescriptors()
	if len(descs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no descriptors: a request needs at least one")
	}
	if len(descs) > s.maxDescs {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: the most a request may have is %d", len(descs), s.maxDescs)
	}
	for i, d := range descs {
		if n := len(d.GetEntries()); n > s.maxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: the most a descriptor may have is %d", i, n, s.maxEntries)
		}
	}
	var wbuf [8]int64
	weights := wbuf[:0]
	if len(descs) > len(wbuf) {
		weights = make([]int64, 0, len(descs))
	}
	weights = weights[:len(descs)]
	p, err := parseDescriptors(descs, int64(in.GetHitsAddend()), weights)
	if err != nil {
		return nil, err
	}
	if p.overrides != nil {
		r := rules.Request{Overrides: p.overrides}
		if err := s.overrides.Apply(&r); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		p.overrides = r.Overrides
	}

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	var merged rules.Result
	if !p.mixed {
		// The common case: one weight, one check, no regrouping.
		res, err := s.check(ctx, weighted(rules.Request{Domain: in.GetDomain(), Descriptors: p.out, Overrides: p.overrides}, weights[0]))
		if err != nil {
			return nil, err
		}
		for i := range p.out {
			resp.Statuses[i] = descriptorStatus(res, i, p.out)
		}
		if res.Lease != "" {
			_ = grpc.SetHeader(ctx, metadata.Pairs(LeaseHeader, res.Lease))
		}
		s.logShadow(in.GetDomain(), res)
		merged = res
	} else if merged, err = s.checkGroups(ctx, in.GetDomain(), p, groupByWeight(weights), resp); err != nil {
		return nil, err
	}
	if !merged.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if len(merged.Statuses) == 0 && merged.Unmatched != "" {
		// The answer stays what Envoy expects (every descriptor OK); the
		// response header tells clients that look, such as floodgate load.
		_ = grpc.SetHeader(ctx, metadata.Pairs(UnmatchedHeader, merged.Unmatched))
	}
	if s.headers {
		resp.ResponseHeadersToAdd = responseHeaders(merged)
	}
	return resp, nil
}

// parsedDescriptors are a request's descriptors in the rule engine's form.
type parsedDescriptors struct {
	out       []rules.Descriptor
	overrides []rules.Override // nil, or one per descriptor once any has a limit
	mixed     bool             // the descriptors' weights differ
}

// parseDescriptors converts descs to the rule engine's form and fills
// weights (len(descs) long) with each descriptor's weight: its own
// hits_addend, else the request's hits, else 1 (peekWeight for an explicit
// 0).
func parseDescriptors(descs []*commonv3.RateLimitDescriptor, hits int64, weights []int64) (parsedDescriptors, error) {
	p := parsedDescriptors{out: make([]rules.Descriptor, len(descs))}
	n := 0
	for _, d := range descs {
		n += len(d.GetEntries())
	}
	slab := make([]rules.Entry, n) // every descriptor's entries, in one allocation
	for i, d := range descs {
		entries := d.GetEntries()
		rd := slab[:len(entries):len(entries)]
		slab = slab[len(entries):]
		for j, e := range entries {
			if e.GetKey() == "" {
				return p, status.Errorf(codes.InvalidArgument, "descriptor %d entry %d has an empty key", i, j)
			}
			rd[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		p.out[i] = rd
		if lo := d.GetLimit(); lo != nil {
			o, err := override(i, lo)
			if err != nil {
				return p, err
			}
			if p.overrides == nil {
				p.overrides = make([]rules.Override, len(descs))
			}
			p.overrides[i] = o
		}
		h := hits
		if ha := d.GetHitsAddend(); ha != nil {
			if ha.GetValue() > math.MaxInt64 {
				return p, status.Errorf(codes.InvalidArgument, "descriptor %d hits_addend %d is too large", i, ha.GetValue())
			}
			h = int64(ha.GetValue())
			if h == 0 {
				h = peekWeight // an explicit 0 checks without counting
			}
		}
		if h == 0 {
			h = 1
		}
		if i > 0 && h != weights[0] {
			p.mixed = true
		}
		weights[i] = h
	}
	return p, nil
}

// weightGroup is the descriptors (by index) that share one weight.
type weightGroup struct {
	hits int64
	idx  []int
}

// groupByWeight groups descriptor indices by weight, in order of first
// appearance: one Check per distinct weight, so each descriptor is counted
// with its own hits_addend.
func groupByWeight(weights []int64) []weightGroup {
	var groups []weightGroup
	for i, h := range weights {
		found := false
		for k := range groups {
			if groups[k].hits == h {
				groups[k].idx = append(groups[k].idx, i)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, weightGroup{hits: h, idx: []int{i}})
		}
	}
	return groups
}

// checkGroups runs one check per weight group, fills resp's statuses and
// returns the groups' results merged, with descriptor indices in the
// request's own order.
func (s *Service) checkGroups(ctx context.Context, domain string, p parsedDescriptors, groups []weightGroup, resp *rlsv3.RateLimitResponse) (rules.Result, error) {
	merged := rules.Result{Allowed: true, Tightest: -1}
	for _, g := range groups {
		req := weighted(rules.Request{Domain: domain, Descriptors: make([]rules.Descriptor, len(g.idx))}, g.hits)
		if p.overrides != nil {
			req.Overrides = make([]rules.Override, len(g.idx))
		}
		for k, i := range g.idx {
			req.Descriptors[k] = p.out[i]
			if p.overrides != nil {
				req.Overrides[k] = p.overrides[i]
			}
		}
		res, err := s.check(ctx, req)
		if err != nil {
			return merged, err
		}
		for k, i := range g.idx {
			resp.Statuses[i] = descriptorStatus(res, k, req.Descriptors)
		}
		// Merge for the response headers; indices are remapped to the
		// request's own descriptor order.
		for _, st := range res.Statuses {
			st.Descriptor = g.idx[st.Descriptor]
			merged.Statuses = append(merged.Statuses, st)
		}
		merged.Rejected = append(merged.Rejected, res.Rejected...)
		merged.Unmatched = res.Unmatched // the same in every group: one domain
		if !res.Allowed {
			merged.Allowed = false
		}
		s.logShadow(domain, res)
	}
	return merged, nil
}

// responseHeaders is the rate limit header fields of res, for Envoy to add
// to the response (nil if none).
func responseHeaders(res rules.Result) []*corev3.HeaderValue {
	fields := ruleheader.Fields(res)
	if len(fields) == 0 {
		return nil
	}
	hv := make([]corev3.HeaderValue, len(fields)) // one allocation for all
	out := make([]*corev3.HeaderValue, len(fields))
	for i, f := range fields {
		hv[i].Key, hv[i].Value = f.Name, f.Value
		out[i] = &hv[i]
	}
	return out
}

// peekWeight stands for a descriptor hits_addend of 0 among the weights.
const peekWeight = -1

// weighted sets req's weight: hits, or for peekWeight a check that counts
// nothing (rules.Request.Peek).
func weighted(req rules.Request, hits int64) rules.Request {
	if hits == peekWeight {
		req.Peek, req.Hits = true, 1
	} else {
		req.Hits = hits
	}
	return req
}

// override converts descriptor i's limit override: requests_per_unit per
// unit times unit_multiplier (1 when unset).
func override(i int, lo *commonv3.RateLimitDescriptor_RateLimitOverride) (rules.Override, error) {
	mult := int64(1)
	if m := lo.GetUnitMultiplier(); m != nil {
		mult = int64(m.GetValue())
	}
	var o rules.Override
	if err := o.SetUnits(int64(lo.GetRequestsPerUnit()), lo.GetUnit().String(), mult); err != nil {
		return o, status.Errorf(codes.InvalidArgument, "descriptor %d limit override: %v", i, err)
	}
	return o, nil
}

// check asks the checker, mapping its failure to a gRPC status.
func (s *Service) check(ctx context.Context, req rules.Request) (rules.Result, error) {
	res, err := s.checker.Check(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return res, status.FromContextError(ctx.Err()).Err()
		}
		if errors.Is(err, rules.ErrInvalidRequest) {
			return res, status.Error(codes.InvalidArgument, err.Error())
		}
		s.log.Warn("rls: check failed", "domain", req.Domain, "err", err)
		return res, status.Errorf(codes.Unavailable, "rate limit check failed: %v", err)
	}
	return res, nil
}

// logShadow logs what shadow rules would have rejected, at most once per
// rule per second.
func (s *Service) logShadow(domain string, res rules.Result) {
	s.shadow.Record(res, "domain", domain)
}

// descriptorStatus builds the status of descriptor i of res; descs are the
// descriptors res decided. A descriptor that repeats an earlier one was
// counted with it (the rule engine counts a key once per request) and gets
// the earlier one's status.
func descriptorStatus(res rules.Result, i int, descs []rules.Descriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
	var best *rules.Status
	unlimited := false
	for pass := 0; pass < 2 && best == nil && !unlimited; pass++ {
		for k := range res.Statuses {
			st := &res.Statuses[k]
			d := st.Descriptor
			if d != i && (pass == 0 || d > i || !slices.Equal(descs[d], descs[i])) {
				continue
			}
			if st.Unlimited {
				unlimited = true
				continue
			}
			if best == nil || better(st, best) {
				best = st
			}
		}
	}
	ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if best == nil {
		if unlimited {
			ds.LimitRemaining = math.MaxUint32
		}
		return ds
	}
	if !best.Shadow && !best.Decision.Allowed {
		ds.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	ds.LimitRemaining = clampUint32(best.Decision.Remaining)
	ds.DurationUntilReset = durationpb.New(best.Decision.ResetAfter)
	if best.Algorithm != algorithm.Concurrency && best.Window > 0 {
		unit, mult, perUnit := Unit(best.Limit, best.Window)
		ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			Name:            best.LimitName,
			RequestsPerUnit: clampUint32(perUnit),
			Unit:            unit,
		}
		if mult > 1 {
			ds.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
	}
	return ds
}

// better reports whether a describes a descriptor better than b: enforcing
// rules before shadow ones, then the more restrictive.
func better(a, b *rules.Status) bool {
	if a.Shadow != b.Shadow {
		return !a.Shadow
	}
	return a.Tighter(b)
}

var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// Unit expresses limit per window in RLS's terms: a unit, a unit multiplier
// (1 means none) and requests per unit·multiplier.
//
// A window that is a whole number of some unit is exact: the largest such
// unit is used with the multiplier, so 60 per 90s is 60 per 90 SECOND and
// 100 per 2h is 100 per 2 HOUR. (Envoy versions that ignore
// unit_multiplier read those as per second and per hour.) A window that is
// not a whole number of seconds is rounded to the nearest whole number of
// seconds (at least 1) and the limit scaled to keep the same rate, rounded
// down but at least 1: 10 per 500ms reads as 20 per SECOND, 3 per 1.5s as 4
// per 2 SECOND. The exact window is always in the RateLimit-Policy header
// field the response carries.
func Unit(limit int64, window time.Duration) (unit rlsv3.RateLimitResponse_RateLimit_Unit, multiplier uint32, perUnit int64) {
	for _, u := range units {
		if window >= u.d && window%u.d == 0 {
			m := window / u.d
			if m > math.MaxUint32 {
				continue
			}
			return u.unit, uint32(m), limit
		}
	}
	// Not a whole number of seconds: the nearest whole number of seconds,
	// with the limit scaled to the same rate.
	secs := max(1, int64((window+time.Second/2)/time.Second))
	if secs > math.MaxUint32 {
		secs = math.MaxUint32
	}
	per := int64(float64(limit) * float64(secs) * float64(time.Second) / float64(window))
	return rlsv3.RateLimitResponse_RateLimit_SECOND, uint32(secs), max(1, per)
}

func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}
