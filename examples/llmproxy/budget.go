package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Usage is the tokens one answer used, as the model reported them.
type Usage struct {
	Input, Output, Total int64
}

// kinds are the budgets a request is asked about, each a descriptor
// {tenant, [model,] tokens: kind}. A rule file limits any of them; a
// descriptor no rule matches is not limited.
var kinds = []struct {
	name      string
	withModel bool
	tokens    func(Usage) int64
}{
	{"total", false, func(u Usage) int64 { return u.Total }},
	{"input", true, func(u Usage) int64 { return u.Input }},
	{"output", true, func(u Usage) int64 { return u.Output }},
}

// Budget asks a Floodgate server, over its RLS API, about a tenant's token
// budgets: the tenant's total, and the input and output tokens of each model.
type Budget struct {
	// RLS is the client of the server's gRPC listener.
	RLS rlsv3.RateLimitServiceClient
	// Domain is the rule domain of the budgets.
	Domain string
	// Timeout bounds each call; 0 means 500ms.
	Timeout time.Duration
}

// Verdict is the answer to a check: whether every budget has tokens left,
// and the tightest of them (the one over its limit, else the one with the
// fewest tokens left), with the window the server gave for it.
type Verdict struct {
	Allowed  bool
	Decision algorithm.Decision
	Window   time.Duration
	// Limited is false when no rule limits any of the request's budgets.
	Limited bool
}

// ErrNotCharged is returned by Charge when the server rejected tokens
// instead of counting them: the rule lacks charge_after_response: true.
var ErrNotCharged = errors.New("the server rejected the charge instead of counting it: mark the budget rule charge_after_response: true")

// Check asks whether tenant has tokens left for model in every budget,
// counting nothing (each descriptor's hits_addend is 0).
func (b *Budget) Check(ctx context.Context, tenant, model string) (Verdict, error) {
	resp, err := b.call(ctx, tenant, model, nil)
	if err != nil {
		return Verdict{}, err
	}
	return verdict(resp), nil
}

// Charge counts the tokens an answer used against each budget.
func (b *Budget) Charge(ctx context.Context, tenant, model string, u Usage) error {
	if u.Total == 0 && u.Input == 0 && u.Output == 0 {
		return nil
	}
	resp, err := b.call(ctx, tenant, model, &u)
	if err != nil {
		return err
	}
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		return ErrNotCharged
	}
	return nil
}

// call sends one RLS request with a descriptor per budget: hits_addend 0
// when u is nil (a check), else the tokens of that kind (kinds with none
// are left out).
func (b *Budget) call(ctx context.Context, tenant, model string, u *Usage) (*rlsv3.RateLimitResponse, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: b.Domain}
	for _, k := range kinds {
		var n uint64
		if u != nil {
			if n = uint64(max(k.tokens(*u), 0)); n == 0 {
				continue
			}
		}
		d := &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(n)}
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "tenant", Value: tenant})
		if k.withModel {
			d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "model", Value: model})
		}
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "tokens", Value: k.name})
		req.Descriptors = append(req.Descriptors, d)
	}
	resp, err := b.RLS.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("rate limit server: %w", err)
	}
	return resp, nil
}

// verdict picks the tightest budget of a check's answer.
func verdict(resp *rlsv3.RateLimitResponse) Verdict {
	v := Verdict{Allowed: resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT}
	best := -1
	for i, st := range resp.GetStatuses() {
		lim := st.GetCurrentLimit()
		if lim == nil {
			continue
		}
		over := st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if best >= 0 {
			prev := resp.GetStatuses()[best]
			prevOver := prev.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
			if prevOver || (!over && st.GetLimitRemaining() >= prev.GetLimitRemaining()) {
				continue
			}
		}
		best = i
	}
	if best < 0 {
		v.Decision.Allowed = v.Allowed
		return v
	}
	st := resp.GetStatuses()[best]
	v.Limited = true
	v.Window = unitWindow(st.GetCurrentLimit())
	v.Decision = algorithm.Decision{
		Allowed:    v.Allowed,
		Limit:      int64(st.GetCurrentLimit().GetRequestsPerUnit()),
		Remaining:  int64(st.GetLimitRemaining()),
		ResetAfter: st.GetDurationUntilReset().AsDuration(),
	}
	if !v.Allowed {
		v.Decision.Reason = algorithm.ReasonOverLimit
		v.Decision.RetryAfter = retryAfter(resp, v.Decision.ResetAfter)
	}
	return v
}

// retryAfter is the server's Retry-After header when it sent one, else the
// time until the tightest budget resets.
func retryAfter(resp *rlsv3.RateLimitResponse, reset time.Duration) time.Duration {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if strings.EqualFold(h.GetKey(), "Retry-After") {
			if s, err := strconv.ParseInt(h.GetValue(), 10, 64); err == nil && s > 0 {
				return time.Duration(s) * time.Second
			}
		}
	}
	return max(reset, time.Second)
}

// unitWindow is the window of an RLS limit: its unit times its multiplier.
func unitWindow(l *rlsv3.RateLimitResponse_RateLimit) time.Duration {
	var unit time.Duration
	switch l.GetUnit() {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		unit = time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		unit = time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		unit = time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		unit = 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		unit = 7 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		unit = 30 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		unit = 365 * 24 * time.Hour
	default:
		return 0
	}
	if m := l.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		unit *= time.Duration(m.GetValue())
	}
	return unit
}
