// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3) on the server's gRPC listener: data
// plane instances (Envoy's rate_limit_quota filter, gRPC servers with
// xDS RLQS) report each bucket's usage on a stream, and get back a token
// bucket per bucket, their share of the bucket's rule.
//
// A bucket id's key/value pairs, sorted by key, are the descriptor the
// domain's rules decide. Each reporting client of a bucket holds a quota
// lease on the rule's key (the rule needs leases: true): its report counts
// the requests it allowed and tops its lease up towards what its demand
// (allowed + denied per second since its last report) needs until its
// assignment expires; the lease's units are then its token bucket (max
// tokens one second of its rate, the rate what the rest covers until the
// assignment's end). The store sizes the leases: whole demands far from
// the limit, shares in proportion to demand near it. So the rule's bound
// holds across every client of every server sharing the store, as it does
// for leases, as long as each client applies its assignments and reports
// before they expire. A bucket not reported for three report intervals is
// abandoned.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/ratelog"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/rules"
)

// Holder applies quota lease ops and charges. *rules.Engine implements it.
type Holder interface {
	Hold(ctx context.Context, req rules.Request, need int64, op lease.Op) (rules.Result, lease.Held, error)
	Charge(ctx context.Context, req rules.Request) (rules.Result, error)
}

// Bounds of what one stream may hold.
const (
	// MaxBuckets is the most buckets one stream may report at once.
	MaxBuckets = 4096
	// defaultInterval is the report interval assumed before a bucket's
	// second report.
	defaultInterval = time.Second
	// latency is the allowance for an assignment to reach the client and
	// for its next report to come back.
	latency = time.Second
	// abandonAfter is how many report intervals a bucket may go without a
	// report before it is abandoned.
	abandonAfter = 3
)

// Service implements RateLimitQuotaServiceServer.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	h    Holder
	log  *slog.Logger
	warn *ratelog.Every
	now  func() time.Time
}

// New returns a Service that holds with h and logs to log (nil:
// slog.Default()).
func New(h Holder, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{h: h, log: log, warn: ratelog.New(time.Minute), now: time.Now}
}

// Register registers s on g.
func (s *Service) Register(g grpc.ServiceRegistrar) { rlqsv3.RegisterRateLimitQuotaServiceServer(g, s) }

// bucket is one bucket of one stream.
type bucket struct {
	id       *rlqsv3.BucketId
	desc     rules.Descriptor
	lease    lease.ID
	seq      int64
	last     time.Time     // the last report
	interval time.Duration // the report interval, estimated
	ttl      time.Duration // the rule's lease ttl, as last held
}

// stream is one client's stream.
type stream struct {
	mu      sync.Mutex
	domain  string
	buckets map[string]*bucket
	send    func(*rlqsv3.RateLimitQuotaResponse) error
}

// StreamRateLimitQuotas serves one client: each report is answered at once
// with the assignments of the buckets it names; buckets that stop being
// reported are abandoned. A malformed report ends the stream with
// INVALID_ARGUMENT.
func (s *Service) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	var sendMu sync.Mutex
	st := &stream{buckets: map[string]*bucket{}, send: func(r *rlqsv3.RateLimitQuotaResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return srv.Send(r)
	}}
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.abandonLoop(ctx, st)
	}()
	defer func() { cancel(); <-done }()
	for {
		in, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.report(ctx, st, in)
		if err != nil {
			return err
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := st.send(resp); err != nil {
				return err
			}
		}
	}
}

// report applies one usage report and returns the assignments it makes.
func (s *Service) report(ctx context.Context, st *stream, in *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if d := in.GetDomain(); d != "" {
		if st.domain != "" && d != st.domain {
			return nil, status.Errorf(codes.InvalidArgument, "domain %q after %q: a stream keeps the domain of its first report; open another stream", clip(d), clip(st.domain))
		}
		st.domain = d
	}
	if st.domain == "" {
		return nil, status.Error(codes.InvalidArgument, "the first report names no domain")
	}
	resp := &rlqsv3.RateLimitQuotaResponse{}
	now := s.now()
	for i, u := range in.GetBucketQuotaUsages() {
		key, desc, err := bucketKey(u.GetBucketId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "usage %d: %v", i, err)
		}
		b, ok := st.buckets[key]
		if !ok {
			if len(st.buckets) >= MaxBuckets {
				return nil, status.Errorf(codes.InvalidArgument, "more than %d buckets on one stream", MaxBuckets)
			}
			b = &bucket{id: u.GetBucketId(), desc: desc, lease: lease.New(), ttl: 10 * time.Second}
			st.buckets[key] = b
		}
		action, err := s.assign(ctx, st.domain, b, u, now)
		if err != nil {
			return nil, err
		}
		if action != nil {
			resp.BucketAction = append(resp.BucketAction, action)
		}
	}
	return resp, nil
}

// assign settles b's report u and returns its new assignment (nil: none).
func (s *Service) assign(ctx context.Context, domain string, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) (*rlqsv3.RateLimitQuotaResponse_BucketAction, error) {
	elapsed := u.GetTimeElapsed().AsDuration()
	if !b.last.IsZero() {
		elapsed = now.Sub(b.last)
		if b.interval == 0 {
			b.interval = elapsed
		} else {
			b.interval = (3*b.interval + elapsed) / 4
		}
	}
	elapsed = max(elapsed, 100*time.Millisecond)
	b.last = now
	interval := b.interval
	if interval <= 0 {
		interval = defaultInterval
	}
	// The assignment lasts two report intervals, within the lease's ttl.
	ta := min(2*interval, b.ttl-latency)
	ta = max(ta, time.Second)
	allowed := int64(min(u.GetNumRequestsAllowed(), uint64(rules.Max().Limit)))
	demand := float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / elapsed.Seconds()
	span := (ta + latency + time.Second).Seconds()
	target := int64(math.Ceil(demand*span*1.25)) + 1
	req := rules.Request{Domain: domain, Descriptors: []rules.Descriptor{b.desc}}
	b.seq++
	res, held, err := s.h.Hold(ctx, req, 0, lease.Op{ID: b.lease, Seq: b.seq, Spent: allowed, Target: target})
	if err == nil && held.TTL == 0 && allowed > 0 && res.NoLease == "" {
		// No lease was live (a first report, or one after an expiry): the
		// requests it allowed under its own fallback are counted all the
		// same.
		_, err = s.h.Charge(ctx, rules.Request{Domain: domain, Descriptors: []rules.Descriptor{b.desc}, Hits: allowed})
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if errors.Is(err, rules.ErrInvalidRequest) {
			return nil, status.Errorf(codes.InvalidArgument, "bucket %v: %v", b.desc, err)
		}
		s.log.Warn("rlqs: hold failed; the client keeps its assignment until it expires", "domain", domain, "err", err)
		return nil, nil
	}
	if held.TTL > 0 {
		b.ttl = held.TTL
		ta = max(min(2*interval, b.ttl-latency), time.Second)
	}
	strategy, ok := s.strategy(domain, res, held, ta)
	if !ok {
		return nil, nil
	}
	action := &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ta),
				RateLimitStrategy:    strategy,
			},
		},
	}
	return action, nil
}

// strategy is the rate limit strategy of a bucket whose lease holds held
// after res, for an assignment of ta; false: none to send.
func (s *Service) strategy(domain string, res rules.Result, held lease.Held, ta time.Duration) (*typev3.RateLimitStrategy, bool) {
	blanket := func(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
	}
	switch {
	case res.Unmatched != "" || res.Unlimited:
		return blanket(typev3.RateLimitStrategy_ALLOW_ALL), true
	case blocked(res):
		return blanket(typev3.RateLimitStrategy_DENY_ALL), true
	case res.NoLease != "":
		if _, ok := s.warn.Add(); ok {
			s.log.Warn("rlqs: a bucket's rule keeps no quota leases, so it gets no assignment (the client's no_assignment_behavior applies): add leases: true to the rule",
				"domain", domain, "why", res.NoLease)
		}
		return nil, false
	case held.Units == 0:
		return blanket(typev3.RateLimitStrategy_DENY_ALL), true
	}
	// The units held cover max_tokens + rate * (ta + latency): the full
	// bucket Envoy starts a new assignment with, and what it refills until
	// the assignment ends and the next report is in.
	span := (ta + latency).Seconds()
	rate := math.Floor(float64(held.Units) / (span + 1))
	tb := &typev3.TokenBucket{}
	if rate >= 1 {
		tb.MaxTokens = uint32(min(rate, math.MaxUint32))
		tb.TokensPerFill = wrapperspb.UInt32(uint32(min(rate, math.MaxUint32)))
		tb.FillInterval = durationpb.New(time.Second)
	} else {
		// Fewer units than a second's worth for the span: all of them at
		// once, and one more only after the span.
		tb.MaxTokens = uint32(min(held.Units, math.MaxUint32))
		tb.TokensPerFill = wrapperspb.UInt32(1)
		tb.FillInterval = durationpb.New(time.Duration(math.Ceil(span)+1) * time.Second)
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, true
}

// blocked reports whether a rule of res blocks every request (limit 0).
func blocked(res rules.Result) bool {
	for _, st := range res.Statuses {
		if !st.Shadow && st.Decision.Reason == algorithm.ReasonBlocked {
			return true
		}
	}
	return false
}

// abandonLoop abandons, every second, the buckets of st not reported for
// abandonAfter report intervals: an AbandonAction goes to the client, and
// the bucket's lease is left to expire (the client may still spend its
// last assignment until then).
func (s *Service) abandonLoop(ctx context.Context, st *stream) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		resp := &rlqsv3.RateLimitQuotaResponse{}
		st.mu.Lock()
		for k, b := range st.buckets {
			iv := b.interval
			if iv <= 0 {
				iv = defaultInterval
			}
			if now.Sub(b.last) > abandonAfter*iv+latency {
				delete(st.buckets, k)
				resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
					BucketId:     b.id,
					BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
				})
			}
		}
		st.mu.Unlock()
		if len(resp.BucketAction) > 0 {
			if err := st.send(resp); err != nil {
				return
			}
		}
	}
}

// bucketKey checks id and returns its canonical key and its descriptor:
// its pairs sorted by key.
func bucketKey(id *rlqsv3.BucketId) (string, rules.Descriptor, error) {
	m := id.GetBucket()
	if len(m) == 0 {
		return "", nil, errors.New("bucket id has no key/value pairs")
	}
	if len(m) > rules.Max().Entries {
		return "", nil, fmt.Errorf("bucket id has %d pairs: the most is %d", len(m), rules.Max().Entries)
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || v == "" {
			return "", nil, errors.New("bucket id has an empty key or value")
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d := make(rules.Descriptor, len(keys))
	var b strings.Builder
	for i, k := range keys {
		d[i] = rules.Entry{Key: k, Value: m[k]}
		fmt.Fprintf(&b, "%d:%s%d:%s", len(k), k, len(m[k]), m[k])
	}
	return b.String(), d, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
