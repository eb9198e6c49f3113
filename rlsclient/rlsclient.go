// Package rlsclient is a Go client for a Floodgate server: the Limiter API
// of package floodgate (Allow, AllowN, Check, Charge, Acquire, with the same
// Decision fields) answered by `floodgate serve` over gRPC, using Envoy's
// Rate Limit Service protocol.
//
//	c, err := rlsclient.New("floodgate:8081", rlsclient.Options{Domain: "api"})
//	...
//	d, err := c.Allow(ctx, "acme") // the rules of domain "api" decide {key: acme}
//
// A key becomes one descriptor, by default the single entry {key: KEY}; the
// server's rules for the domain decide it (match: {key: "*"}, count_by:
// [key]). Describe maps keys to richer descriptors.
//
// Every call has a deadline (Options.Timeout). When the server cannot be
// reached in time, the failure policy decides: open (the default) allows
// the request, closed rejects it with Reason algorithm.ReasonStoreUnavailable;
// either way the error goes to OnError and to a warning in the log, and the
// call returns no error, so a Client can stand where a Limiter stands (for
// example behind httplimit.LimitBy). A request the server finds malformed
// (INVALID_ARGUMENT: an empty entry key, a domain it rejects) is an error,
// not an outage.
//
// A key that no rule of the domain matches is allowed without limit: its
// Decision is Allowed with Limit 0, and the log gets a warning, since it
// usually means the domain or the descriptor is not the one the rules
// expect. Options.RequireMatch makes it an error (ErrUnmatched) instead.
//
// One Client holds one gRPC connection (HTTP/2), which every concurrent
// call shares: a call is a stream on it, with no goroutine of its own and
// no new connection. Make one Client per server and reuse it.
//
// Embed the library (package floodgate) when one process owns the limit or
// the processes share Redis; call a server when programs in other languages
// or many small services share limits, when the rules should change without
// redeploying, or when Envoy already asks the same server.
package rlsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Entry is one key/value pair of a Descriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is an ordered list of entries, as in Envoy's RLS API and the
// server's rules: the server decides it with every rule that matches it.
type Descriptor []Entry

// leaseHeader is the response header the server's lease comes in
// (rls.LeaseHeader, written again here so that the client need not link
// the server; the server's tests release leases through this client).
const leaseHeader = "floodgate-lease"

// Decision is the outcome of one call, as floodgate.Decision.
type Decision = algorithm.Decision

// DefaultTimeout is the deadline of a call when Options.Timeout is 0.
const DefaultTimeout = 100 * time.Millisecond

// LogEvery is how often at most the client logs each kind of warning
// (the failure policy deciding, a key that no rule matched).
const LogEvery = 10 * time.Second

// ErrUnmatched is returned, with Options.RequireMatch, for a key that no
// rule of the domain matched.
var ErrUnmatched = errors.New("rlsclient: no rule of the domain matched the key's descriptor: check Options.Domain and the descriptor against the server's rules")

// Options configures a Client.
type Options struct {
	// Domain is the rule domain keys are decided in; required.
	Domain string
	// Describe returns the descriptor a key is decided as; nil means the
	// single entry {EntryKey: key}.
	Describe func(key string) Descriptor
	// EntryKey is the entry key of the default descriptor; empty means "key".
	EntryKey string
	// Timeout bounds each call (it also applies when the caller's context
	// has a later deadline or none); 0 means DefaultTimeout.
	Timeout time.Duration
	// FailClosed rejects when the server cannot answer in time; by default
	// such requests are allowed.
	FailClosed bool
	// OnError, when set, receives every error the failure policy absorbed.
	OnError func(error)
	// Logger receives a warning, at most one every LogEvery for each kind,
	// when the failure policy decides and when a key matched no rule; nil
	// means slog.Default(). A logger with a discarding handler silences
	// them.
	Logger *slog.Logger
	// RequireMatch makes a key that no rule of the domain matches an error
	// (ErrUnmatched) instead of an allowed decision without limit.
	RequireMatch bool
	// HTTPURL is the base URL of the server's JSON API
	// ("http://floodgate:8080"); releasing a lease (Acquire) needs it, as RLS
	// has no release.
	HTTPURL string
	// HTTPClient makes the JSON API calls; nil means a client of its own.
	HTTPClient *http.Client
	// DialOptions are added to the gRPC dial; without any, the connection
	// is plain text.
	DialOptions []grpc.DialOption
	// Leases, when set, makes Allow and AllowN decide locally from quota
	// leases taken from the server (see LeaseOptions).
	Leases *LeaseOptions
}

// Client asks a Floodgate server. It is safe for concurrent use.
type Client struct {
	o    Options
	conn *grpc.ClientConn
	rls  rlsv3.RateLimitServiceClient
	// leases is the lease table, with Options.Leases.
	leases *leases
	// calls counts the calls sent to the server (RLS and Lease).
	calls atomic.Int64

	lastOutageLog, lastUnmatchedLog atomic.Int64 // Unix nanoseconds
}

// New returns a client of the Floodgate gRPC listener at addr (host:port,
// or any gRPC target). It does not connect until the first call.
func New(addr string, o Options) (*Client, error) {
	if o.Domain == "" {
		return nil, errors.New("rlsclient: Options.Domain is empty: name the rule domain to decide in")
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.EntryKey == "" {
		o.EntryKey = "key"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: o.Timeout}
	}
	o.HTTPURL = strings.TrimRight(o.HTTPURL, "/")
	dial := o.DialOptions
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("rlsclient: %w", err)
	}
	c := &Client{o: o, conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn)}
	if o.Leases != nil {
		c.leases = newLeases(c, *o.Leases)
	}
	return c, nil
}

// Close gives back the client's leases and closes the connection.
func (c *Client) Close() error {
	if c.leases != nil {
		c.leases.close()
	}
	return c.conn.Close()
}

// Allow is AllowN(ctx, key, 1).
func (c *Client) Allow(ctx context.Context, key string) (Decision, error) {
	return c.AllowN(ctx, key, 1)
}

// AllowN asks whether a request of cost n for key may proceed now, and
// the server counts it if so.
func (c *Client) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 {
		return Decision{Reason: algorithm.ReasonBadCost}, nil
	}
	if c.leases != nil && n <= math.MaxUint32/2 {
		return c.leases.allow(ctx, key, n)
	}
	return c.ask(ctx, key, uint64(n))
}

// Check asks whether key has allowance left without counting anything
// (a descriptor hits_addend of 0).
func (c *Client) Check(ctx context.Context, key string) (Decision, error) {
	return c.ask(ctx, key, 0)
}

// ErrNotCharged is returned by Charge when the server decided the charge
// as a request and rejected it, so it was not counted: the rule that
// applies lacks charge_after_response: true.
var ErrNotCharged = errors.New("rlsclient: the server rejected the charge instead of counting it; mark the rule charge_after_response: true")

// Charge counts n units for key after the response. The server counts them
// without deciding, even past the limit, when the rule that applies says
// charge_after_response: true (see the server's rules documentation); for
// other rules it is AllowN, and a rejection returns ErrNotCharged. The
// failure policy does not apply: a charge that cannot be delivered returns
// its error, so the caller may retry it.
func (c *Client) Charge(ctx context.Context, key string, n int64) (Decision, error) {
	if n < 1 {
		return c.Check(ctx, key)
	}
	d, err := c.call(ctx, key, uint64(n))
	if err == nil && !d.Allowed {
		err = ErrNotCharged
	}
	return d, err
}

// ask is call with the failure policy applied.
func (c *Client) ask(ctx context.Context, key string, addend uint64) (Decision, error) {
	return c.absorb(c.call(ctx, key, addend))
}

// absorb applies the failure policy to the outcome of a call.
func (c *Client) absorb(d Decision, err error) (Decision, error) {
	if err == nil || errors.Is(err, ErrUnmatched) {
		return d, err
	}
	if status.Code(err) == codes.InvalidArgument {
		return d, err // a malformed request is no outage
	}
	return c.absorbWith(err, c.o.FailClosed)
}

// absorbWith is absorb for an outage, failing closed or open as told.
func (c *Client) absorbWith(err error, closed bool) (Decision, error) {
	if c.o.OnError != nil {
		c.o.OnError(err)
	}
	if closed {
		c.warn(&c.lastOutageLog, "rlsclient: rate limit server unavailable, rejecting (fail closed)", "domain", c.o.Domain, "err", err)
		return Decision{Reason: algorithm.ReasonStoreUnavailable}, nil
	}
	c.warn(&c.lastOutageLog, "rlsclient: rate limit server unavailable, allowing without limit (fail open)", "domain", c.o.Domain, "err", err)
	return Decision{Allowed: true}, nil
}

// warn logs msg unless a message of its kind (last) was logged within
// LogEvery.
func (c *Client) warn(last *atomic.Int64, msg string, args ...any) {
	now := time.Now().UnixNano()
	prev := last.Load()
	if now-prev < int64(LogEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	c.o.Logger.Warn(msg, args...)
}

// call sends one RLS request with descriptor hits_addend addend.
func (c *Client) call(ctx context.Context, key string, addend uint64) (Decision, error) {
	d, _, err := c.callLease(ctx, key, addend)
	return d, err
}

// callLease is call that also returns the lease the server's concurrency
// rules hold the request's units under (rls.LeaseHeader), or "".
func (c *Client) callLease(ctx context.Context, key string, addend uint64) (Decision, string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
	defer cancel()
	d := &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(addend)}
	for _, e := range c.describe(key) {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	var md metadata.MD
	c.calls.Add(1)
	resp, err := c.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      c.o.Domain,
		Descriptors: []*commonv3.RateLimitDescriptor{d},
	}, grpc.Header(&md))
	if err != nil {
		return Decision{}, "", fmt.Errorf("rlsclient: %w", err)
	}
	var lease string
	if v := md.Get(leaseHeader); len(v) > 0 {
		lease = v[0]
	}
	if unmatched(resp) {
		if c.o.RequireMatch {
			return Decision{}, "", ErrUnmatched
		}
		c.warn(&c.lastUnmatchedLog, "rlsclient: no rule matched, allowed without limit", "domain", c.o.Domain, "entries", len(d.Entries))
	}
	return decision(resp), lease, nil
}

// unmatched reports whether no rule applied to the request: an allowed
// answer whose statuses carry no limit and are not unlimited (an unlimited
// rule answers limit_remaining 4294967295).
func unmatched(resp *rlsv3.RateLimitResponse) bool {
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		return false
	}
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil || st.GetLimitRemaining() == math.MaxUint32 {
			return false
		}
	}
	return true
}

func (c *Client) describe(key string) Descriptor {
	if c.o.Describe != nil {
		return c.o.Describe(key)
	}
	return Descriptor{{Key: c.o.EntryKey, Value: key}}
}

// decision reads a Decision from the response: allowed from the overall
// code, the limit and remaining allowance from the descriptor's status,
// RetryAfter from the Retry-After field the server adds when it adds
// headers, else from the duration_until_reset of the first status over its
// limit.
func decision(resp *rlsv3.RateLimitResponse) Decision {
	d := Decision{Allowed: resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT}
	if sts := resp.GetStatuses(); len(sts) > 0 {
		st := sts[0]
		d.Remaining = int64(st.GetLimitRemaining())
		d.ResetAfter = st.GetDurationUntilReset().AsDuration()
		d.Limit = int64(st.GetCurrentLimit().GetRequestsPerUnit())
	}
	if !d.Allowed {
		d.Reason = algorithm.ReasonOverLimit
		for _, h := range resp.GetResponseHeadersToAdd() {
			if strings.EqualFold(h.GetKey(), "Retry-After") {
				if s, err := strconv.ParseInt(h.GetValue(), 10, 64); err == nil && s > 0 {
					d.RetryAfter = time.Duration(s) * time.Second
				}
			}
		}
		if d.RetryAfter == 0 {
			for _, st := range resp.GetStatuses() {
				if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
					d.RetryAfter = st.GetDurationUntilReset().AsDuration()
					break
				}
			}
		}
	}
	return d
}
