package envoycompat

import (
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/internal/ratelog"
)

// GuardSettings bound what hostile clients can hold on the gRPC listener:
// connections, calls in flight, calls whose request message has not
// arrived, and stream resets (HTTP/2 rapid reset), in all and per client
// address. They
// have no environment variable: ParseSettings gives them serve's own-mode
// defaults (connections.grpc in its configuration file).
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
}

// defaultGuard is serve's own-mode connections.grpc defaults.
func defaultGuard() GuardSettings {
	return GuardSettings{MaxConns: 4096, MaxConnsPerClient: 256, MaxCalls: 8192, MaxCallsPerClient: 2048, MaxWaiting: 4096, MaxWaitingPerClient: 1024,
		MessageTimeout: 10 * time.Second, MaxResets: 1000, ResetsPerSecond: 100, ResetCooldown: 10 * time.Second}
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
	opts := s.admission.ServerOptions()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if g.MaxResets > 0 {
		creds = grpcguard.NewResets(grpcguard.ResetOptions{
			Budget: float64(g.MaxResets), StreamCredit: 0.5, RefillPerSecond: g.ResetsPerSecond,
			Cooldown: g.ResetCooldown, OnCut: s.guardLog.refused,
		}).Credentials(creds)
	}
	return append(opts, grpc.Creds(creds))
}
