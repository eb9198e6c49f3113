package envoycompat

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/internal/ratelog"
)

// GuardSettings bound what hostile clients can hold on the gRPC listener:
// connections, calls in flight, calls whose request message has not
// arrived, and stream resets (HTTP/2 rapid reset, MadeYouReset), in all and
// per client address. ParseSettings gives them serve's own-mode defaults
// (connections.grpc in its configuration file); the reset budget can be
// set by the FLOODGATE_GRPC_* variables of guardSettings, the others have
// no variable.
type GuardSettings struct {
	// MaxConns and MaxConnsPerClient cap the connections held open: see
	// connlimit.Listener.
	MaxConns, MaxConnsPerClient     int
	MaxCalls, MaxCallsPerClient     int
	MaxWaiting, MaxWaitingPerClient int
	// MessageTimeout cancels a call whose request message has not arrived
	// this long after its HEADERS.
	MessageTimeout time.Duration
	// MaxResets, ResetsPerSecond and ResetCooldown: see
	// grpcguard.ResetOptions (Budget, RefillPerSecond, Cooldown).
	MaxResets       int
	ResetsPerSecond float64
	ResetCooldown   time.Duration
	// MaxListenerResets and ListenerResetsPerSecond: the listener's budget
	// (ListenerBudget, ListenerRefillPerSecond); FreeCancelAfter: see
	// grpcguard.ResetOptions.
	MaxListenerResets       int
	ListenerResetsPerSecond float64
	FreeCancelAfter         time.Duration
	// MaxDescriptors and MaxEntries bound an RLS call's descriptors and a
	// descriptor's entries (0: no bound, as in the reference).
	MaxDescriptors, MaxEntries int
}

// defaultGuard is serve's own-mode connections.grpc defaults, but for the
// reset budget's, which are guardSettings' defaults.
func defaultGuard() GuardSettings {
	return GuardSettings{MaxConns: 4096, MaxConnsPerClient: 256, MaxCalls: 8192, MaxCallsPerClient: 2048, MaxWaiting: 4096, MaxWaitingPerClient: 1024,
		MessageTimeout: 10 * time.Second}
}

// guardSettings are the variables of the reset budget and of the bounds
// on an RLS call's descriptors, Floodgate's own
// (named FLOODGATE_ as FLOODGATE_WILDCARDS is, so as not to be taken for
// the reference's), with serve's own-mode defaults.
var guardSettings = []setting{
	{"FLOODGATE_GRPC_MAX_RESETS", "1000", integer(func(s *Settings) *int { return &s.Guard.MaxResets }, 0, math.MaxInt32)},
	{"FLOODGATE_GRPC_RESETS_PER_SECOND", "100", rate(func(s *Settings) *float64 { return &s.Guard.ResetsPerSecond })},
	{"FLOODGATE_GRPC_RESET_COOLDOWN", "10s", duration(func(s *Settings) *time.Duration { return &s.Guard.ResetCooldown })},
	{"FLOODGATE_GRPC_MAX_LISTENER_RESETS", "10000", integer(func(s *Settings) *int { return &s.Guard.MaxListenerResets }, 0, math.MaxInt32)},
	{"FLOODGATE_GRPC_LISTENER_RESETS_PER_SECOND", "1000", rate(func(s *Settings) *float64 { return &s.Guard.ListenerResetsPerSecond })},
	{"FLOODGATE_GRPC_FREE_CANCEL_AFTER", "10ms", duration(func(s *Settings) *time.Duration { return &s.Guard.FreeCancelAfter })},
	{"FLOODGATE_RLS_MAX_DESCRIPTORS", "64", integer(func(s *Settings) *int { return &s.Guard.MaxDescriptors }, 0, math.MaxInt32)},
	{"FLOODGATE_RLS_MAX_ENTRIES", "64", integer(func(s *Settings) *int { return &s.Guard.MaxEntries }, 0, math.MaxInt32)},
}

// rate parses a finite rate per second that is not negative.
func rate(dst func(*Settings) *float64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%q is not a rate per second such as 100", clip(v))
		}
		*dst(s) = f
		return nil
	}
}

// capDescriptors answers INVALID_ARGUMENT, before the call is decided, to
// an RLS call with more than MaxDescriptors descriptors or a descriptor
// with more than MaxEntries entries.
func (g GuardSettings) capDescriptors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if r, ok := req.(*rlsv3.RateLimitRequest); ok {
		descs := r.GetDescriptors()
		if g.MaxDescriptors > 0 && len(descs) > g.MaxDescriptors {
			return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: the most a request may have is %d (FLOODGATE_RLS_MAX_DESCRIPTORS)", len(descs), g.MaxDescriptors)
		}
		if g.MaxEntries > 0 {
			for i, d := range descs {
				if n := len(d.GetEntries()); n > g.MaxEntries {
					return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has %d entries: the most a descriptor may have is %d (FLOODGATE_RLS_MAX_ENTRIES)", i, n, g.MaxEntries)
				}
			}
		}
	}
	return h(ctx, req)
}

// guardLog counts what the guards refuse and logs the counts, at most one
// record every 10 s.
type guardLog struct {
	s     *Server
	every *ratelog.Every
	mu    sync.Mutex
	n     map[string]int64 // by reason, since the start
}

func (g *guardLog) refused(reason string) {
	g.mu.Lock()
	g.n[reason]++
	total := g.n[reason]
	g.mu.Unlock()
	if n, due := g.every.Add(); due {
		g.s.log.Warn("gRPC calls refused or connections cut by a bound on hostile traffic", "refused", n,
			"last_reason", reason, "total_for_reason", total)
	}
}

// refusals returns how many calls or connections each reason refused.
func (g *guardLog) refusals() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]int64, len(g.n))
	for k, v := range g.n {
		m[k] = v
	}
	return m
}

// limitConns wraps the gRPC listener ln in the connection caps.
func (s *Server) limitConns(ln net.Listener) net.Listener {
	g := s.set.Guard
	if g.MaxConns == 0 && g.MaxConnsPerClient == 0 {
		return ln
	}
	return connlimit.New(ln, ListenerGRPC, g.MaxConns, g.MaxConnsPerClient, s.log, s.guardLog.refused)
}

// grpcGuards returns the gRPC server options that apply s.set.Guard, with
// creds (nil: plaintext) wrapped to watch every connection's stream resets.
func (s *Server) grpcGuards(creds credentials.TransportCredentials) []grpc.ServerOption {
	g := s.set.Guard
	s.guardLog = &guardLog{s: s, every: ratelog.New(10 * time.Second), n: map[string]int64{}}
	s.admission = grpcguard.NewAdmission(grpcguard.AdmissionOptions{
		MaxCalls: g.MaxCalls, MaxCallsPerClient: g.MaxCallsPerClient,
		MaxWaiting: g.MaxWaiting, MaxWaitingPerClient: g.MaxWaitingPerClient,
		MessageTimeout: g.MessageTimeout, OnRefuse: s.guardLog.refused,
	})
	opts := append(s.admission.ServerOptions(), grpc.ChainUnaryInterceptor(g.capDescriptors))
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if g.MaxResets > 0 || g.MaxListenerResets > 0 {
		// The stream credits are serve's own mode's: an address resetting
		// fewer than half of its streams, a listener whose clients reset
		// fewer than about a tenth, never run out.
		creds = grpcguard.NewResets(grpcguard.ResetOptions{
			Budget: float64(g.MaxResets), StreamCredit: 1, RefillPerSecond: g.ResetsPerSecond,
			ListenerBudget: float64(g.MaxListenerResets), ListenerStreamCredit: 0.1, ListenerRefillPerSecond: g.ListenerResetsPerSecond,
			FreeCancelAfter: g.FreeCancelAfter, Cooldown: g.ResetCooldown, OnCut: s.guardLog.refused,
		}).Credentials(creds)
	}
	return append(opts, grpc.Creds(creds))
}
