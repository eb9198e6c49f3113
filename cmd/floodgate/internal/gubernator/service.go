// Package gubernator serves gubernator's public API (gubernator v2's
// service pb.gubernator.V1) from `floodgate serve`: GetRateLimits,
// HealthCheck and LiveCheck over gRPC, and POST /v1/GetRateLimits, GET
// /v1/HealthCheck and GET /v1/LiveCheck as gubernator's HTTP gateway
// answers them (JSON with gubernator's field names). Each request is
// decided by gubernatoralg.New, which computes token and leaky buckets
// as gubernator does, on the server's counter store. docs/migration-gubernator.md
// lists what differs from gubernator.
package gubernator

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/algorithm"
	gubernatoralg "github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
	"github.com/floodgate-dev/floodgate/store"
)

// MaxBatch is the most requests one GetRateLimits call may carry, as in
// gubernator.
const MaxBatch = 1000

// Health values of HealthCheckResp.status.
const (
	Healthy   = "healthy"
	Unhealthy = "unhealthy"
)

// Options configures a Service.
type Options struct {
	// Store decides. Its Config-keyed state holds every gubernator key
	// under one limit (see gubernatoralg.New).
	Store store.Store
	// Clock is the time of a call (created_at when the request has none,
	// and the calendar periods of DURATION_IS_GREGORIAN). Nil means
	// time.Now.
	Clock func() time.Time
	// OnFailure is what a request does when a shared store cannot answer.
	OnFailure store.FailurePolicy
	// Ready reports whether the server can decide, and why not; nil means
	// always ready.
	Ready func(ctx context.Context) (bool, string)
	// Peers returns HealthCheckResp.peer_count: the limiter nodes sharing
	// the counts. Nil means 1 (the memory store).
	Peers func() int
	// Advertise returns HealthCheckResp.advertise_address: the gRPC
	// listener's address.
	Advertise func() string
	// Unsupported, when set, is the error every rate limit request gets
	// instead of a decision: the store cannot run gubernator's algorithm.
	Unsupported string
	// Version is the gubernator release whose answers to give (the zero
	// value is the newest, v2.21.0).
	Version gubernatoralg.Version
	// WaitCeiling caps the wait a max_wait request can book (gubernator's
	// GUBER_SCHEDULE_MAX_WAIT); 0 means gubernator's default, 5 minutes.
	WaitCeiling time.Duration
	// NoSchedule, when set, is why max_wait requests cannot be honoured
	// (the arrangement does not decide each request where its key is
	// kept): each gets an error naming the field.
	NoSchedule string
}

// DefaultWaitCeiling is gubernator's default GUBER_SCHEDULE_MAX_WAIT.
const DefaultWaitCeiling = 5 * time.Minute

// Service is gubernator's V1 service on a Floodgate store.
type Service struct {
	gubernatorpb.UnimplementedV1Server
	o Options
}

// New returns the service o describes.
func New(o Options) *Service {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Ready == nil {
		o.Ready = func(context.Context) (bool, string) { return true, "" }
	}
	if o.Advertise == nil {
		o.Advertise = func() string { return "" }
	}
	if o.WaitCeiling <= 0 {
		o.WaitCeiling = DefaultWaitCeiling
	}
	return &Service{o: o}
}

// Register adds the service to a gRPC server.
func (s *Service) Register(g *grpc.Server) { gubernatorpb.RegisterV1Server(g, s) }

// GetRateLimits decides every request of r on its own, in order (requests
// for one key see the ones before them), and answers in the same order. A
// request gubernator would refuse gets gubernator's error in its answer; one
// whose numbers lie outside what Floodgate computes exactly gets an error
// naming the field.
func (s *Service) GetRateLimits(ctx context.Context, r *gubernatorpb.GetRateLimitsReq) (*gubernatorpb.GetRateLimitsResp, error) {
	if len(r.GetRequests()) > MaxBatch {
		return nil, status.Errorf(codes.OutOfRange, "Requests.RateLimits list too large; max size is '%d'", MaxBatch)
	}
	now := s.o.Clock()
	nowMS := now.UnixNano() / 1e6
	resp := &gubernatorpb.GetRateLimitsResp{Responses: make([]*gubernatorpb.RateLimitResp, len(r.GetRequests()))}
	reqs := make([]store.Request, 0, len(r.GetRequests()))
	idx := make([]int, 0, len(r.GetRequests()))
	created := make([]int64, 0, len(r.GetRequests()))
	for i, q := range r.GetRequests() {
		if q == nil {
			q = &gubernatorpb.RateLimitReq{}
		}
		a, createdAt, errText := s.prepare(q, now, nowMS)
		if errText != "" {
			resp.Responses[i] = &gubernatorpb.RateLimitResp{Error: errText}
			continue
		}
		reqs = append(reqs, store.Request{Algorithm: a, Key: q.GetName() + "_" + q.GetUniqueKey(), Cost: q.GetHits(), OnFailure: s.o.OnFailure})
		idx = append(idx, i)
		created = append(created, createdAt)
	}
	if len(reqs) == 0 {
		return resp, nil
	}
	out := make([]algorithm.Decision, len(reqs))
	var err error
	if len(reqs) == 1 {
		out[0], err = s.o.Store.DecideOne(ctx, now.UnixNano(), reqs[0])
	} else {
		err = s.o.Store.Decide(ctx, now.UnixNano(), reqs, out)
	}
	for j, i := range idx {
		q := r.GetRequests()[i]
		if err != nil {
			resp.Responses[i] = &gubernatorpb.RateLimitResp{Error: fmt.Sprintf("Error while apply rate limit for '%s': floodgate: %v", reqs[j].Key, err)}
			continue
		}
		resp.Responses[i] = answer(q, reqs[j].Key, created[j], out[j])
	}
	return resp, nil
}

// answer is gubernator's RateLimitResp for decision d of request q.
func answer(q *gubernatorpb.RateLimitReq, key string, createdAt int64, d algorithm.Decision) *gubernatorpb.RateLimitResp {
	st := gubernatorpb.Status_UNDER_LIMIT
	switch d.Reason {
	case "":
	case algorithm.ReasonOverLimit:
		st = gubernatorpb.Status_OVER_LIMIT
	case gubernatoralg.ReasonScheduled:
		st = gubernatorpb.Status_SCHEDULED
	case gubernatoralg.ReasonNeverFits:
		st = gubernatorpb.Status_NEVER_FITS
	case gubernatoralg.ReasonBadPeriod:
		which := "tokenBucket"
		if q.GetAlgorithm() == gubernatorpb.Algorithm_LEAKY_BUCKET {
			which = "leakyBucket"
		}
		msg := "behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval"
		if q.GetDuration() == 3 {
			msg = "`Duration = GregorianWeeks` not yet supported; consider making a PR!`"
		}
		return &gubernatorpb.RateLimitResp{Error: fmt.Sprintf("Error while apply rate limit for '%s': during workerPool.GetRateLimit: Error in %s: %s", key, which, msg)}
	default: // a failure policy's answer: the store was unavailable
		return &gubernatorpb.RateLimitResp{Error: fmt.Sprintf("Error while apply rate limit for '%s': floodgate: %s", key, d.Reason.Message())}
	}
	return &gubernatorpb.RateLimitResp{Status: st, Limit: d.Limit, Remaining: d.Remaining,
		ResetTime: createdAt + int64(d.ResetAfter/time.Millisecond), RetryAfter: int64(d.RetryAfter / time.Millisecond)}
}

// prepare checks q as gubernator does, then against Floodgate's bounds,
// and returns its algorithm and created_at, or the answer's error text.
func (s *Service) prepare(q *gubernatorpb.RateLimitReq, now time.Time, nowMS int64) (algorithm.Algorithm, int64, string) {
	if q.GetUniqueKey() == "" {
		return nil, 0, "field 'unique_key' cannot be empty"
	}
	if q.GetName() == "" {
		return nil, 0, "field 'namespace' cannot be empty"
	}
	maxWait := int64(0) // v2.13.0 has no max_wait: it ignores the field
	if s.o.Version != gubernatoralg.V213 {
		if msg := validateMaxWait(q); msg != "" {
			return nil, 0, msg
		}
		maxWait = q.GetMaxWait()
	}
	key := q.GetName() + "_" + q.GetUniqueKey()
	createdAt := nowMS
	if q.CreatedAt != nil && *q.CreatedAt != 0 {
		createdAt = *q.CreatedAt
	}
	leaky := false
	switch q.GetAlgorithm() {
	case gubernatorpb.Algorithm_TOKEN_BUCKET:
	case gubernatorpb.Algorithm_LEAKY_BUCKET:
		leaky = true
	default:
		return nil, 0, fmt.Sprintf("Error while apply rate limit for '%s': during workerPool.GetRateLimit: Invalid rate limit algorithm '%d'", key, q.GetAlgorithm())
	}
	if s.o.Unsupported != "" {
		return nil, 0, fmt.Sprintf("Error while apply rate limit for '%s': floodgate: %s", key, s.o.Unsupported)
	}
	if msg := checkBounds(q, leaky); msg != "" {
		return nil, 0, fmt.Sprintf("Error while apply rate limit for '%s': floodgate: %s", key, msg)
	}
	if maxWait > 0 && s.o.NoSchedule != "" {
		return nil, 0, fmt.Sprintf("Error while apply rate limit for '%s': floodgate: field 'max_wait' is not supported %s", key, s.o.NoSchedule)
	}
	p := gubernatoralg.Params{Leaky: leaky, Limit: q.GetLimit(), Duration: q.GetDuration(), Burst: q.GetBurst(),
		Behavior: int64(q.GetBehavior()), CreatedAt: createdAt, Version: s.o.Version,
		MaxWait: maxWait, WaitCeiling: s.o.WaitCeiling.Milliseconds()}
	if p.Behavior&gubernatoralg.Gregorian != 0 {
		// gubernator reads calendar periods in the process's time zone.
		p.Period = gubernatoralg.PeriodAt(now.In(time.Local), q.GetDuration(), s.o.Version)
	}
	return gubernatoralg.New(p), createdAt, ""
}

// validateMaxWait is gubernator v2.21.0's: the error of a max_wait that is
// negative or combined with what scheduled admission does not support, or
// "".
func validateMaxWait(q *gubernatorpb.RateLimitReq) string {
	b := q.GetBehavior()
	switch {
	case q.GetMaxWait() < 0:
		return "field 'max_wait' cannot be negative"
	case q.GetMaxWait() == 0:
		return ""
	case q.GetAlgorithm() != gubernatorpb.Algorithm_LEAKY_BUCKET:
		return "max_wait is only supported by LEAKY_BUCKET"
	case b&gubernatorpb.Behavior_GLOBAL != 0:
		return "max_wait cannot be combined with GLOBAL"
	case b&gubernatorpb.Behavior_DURATION_IS_GREGORIAN != 0:
		return "max_wait cannot be combined with DURATION_IS_GREGORIAN"
	case b&gubernatorpb.Behavior_DRAIN_OVER_LIMIT != 0:
		return "max_wait cannot be combined with DRAIN_OVER_LIMIT"
	case b&gubernatorpb.Behavior_RESET_REMAINING != 0:
		return "max_wait cannot be combined with RESET_REMAINING"
	case q.GetHits() < 0:
		return "max_wait cannot be combined with negative hits"
	}
	return ""
}

// checkBounds returns why q's numbers lie outside what Floodgate computes
// exactly (gubernator's int64 arithmetic overflows there, or its answer
// depends on the processor), or "".
func checkBounds(q *gubernatorpb.RateLimitReq, leaky bool) string {
	const maxLimit = algorithm.MaxLimit
	minLimit, minDuration := int64(0), int64(0)
	if leaky {
		minLimit = 1
		if q.GetBehavior()&gubernatorpb.Behavior_DURATION_IS_GREGORIAN == 0 {
			minDuration = 1
		}
	}
	switch {
	case q.GetLimit() < minLimit || q.GetLimit() > maxLimit:
		return fmt.Sprintf("field 'limit' must be between %d and %d, got %d", minLimit, int64(maxLimit), q.GetLimit())
	case q.GetHits() < -maxLimit || q.GetHits() > maxLimit:
		return fmt.Sprintf("field 'hits' must be between %d and %d, got %d", -int64(maxLimit), int64(maxLimit), q.GetHits())
	case leaky && (q.GetBurst() < 0 || q.GetBurst() > maxLimit):
		return fmt.Sprintf("field 'burst' must be between 0 and %d, got %d", int64(maxLimit), q.GetBurst())
	case q.GetDuration() < minDuration || q.GetDuration() > gubernatoralg.MaxDuration:
		return fmt.Sprintf("field 'duration' must be between %d and %d milliseconds, got %d", minDuration, gubernatoralg.MaxDuration, q.GetDuration())
	case q.CreatedAt != nil && (*q.CreatedAt < 0 || *q.CreatedAt > gubernatoralg.MaxCreatedAt):
		return fmt.Sprintf("field 'created_at' must be between 0 and %d (Unix milliseconds), got %d", gubernatoralg.MaxCreatedAt, *q.CreatedAt)
	}
	return ""
}

// HealthCheck answers "healthy" while the server can decide; otherwise it
// fails with Unavailable and the reason, as gubernator does.
func (s *Service) HealthCheck(ctx context.Context, _ *gubernatorpb.HealthCheckReq) (*gubernatorpb.HealthCheckResp, error) {
	ok, why := s.o.Ready(ctx)
	if !ok {
		return nil, status.Error(codes.Unavailable, why)
	}
	peers := 1
	if s.o.Peers != nil {
		peers = max(s.o.Peers(), 1)
	}
	resp := &gubernatorpb.HealthCheckResp{Status: Healthy, PeerCount: int32(peers), AdvertiseAddress: s.o.Advertise()}
	if s.o.Version != gubernatoralg.V213 {
		// The node itself: the others sharing the store are counted in
		// peer_count, but their addresses are not known here.
		resp.LocalPeers = []*gubernatorpb.PeerHealthResp{{GrpcAddress: resp.AdvertiseAddress}}
		resp.RegionPeers = []*gubernatorpb.PeerHealthResp{}
	}
	return resp, nil
}

// LiveCheck answers while the server runs.
func (s *Service) LiveCheck(context.Context, *gubernatorpb.LiveCheckReq) (*gubernatorpb.LiveCheckResp, error) {
	return &gubernatorpb.LiveCheckResp{}, nil
}
