package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
)

// grpcGuards returns the gRPC server options that bound calls and stream
// resets (connections.grpc), with creds (nil: plaintext) wrapped to watch
// every connection, and registers their metrics.
func (s *Server) grpcGuards(creds credentials.TransportCredentials) []grpc.ServerOption {
	g := s.cfg.Connections.GRPC
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "floodgate_grpc_refused_total",
		Help: "gRPC calls refused or cancelled by a bound (calls_full, client_calls_full, waiting_full, client_waiting_full, waiting_evicted, message_timeout) and connections cut off for stream resets, their address's (resets) or the listener's (listener_resets), or refused or cut during a client's reset cooldown (cooldown).",
	}, []string{"reason"})
	reg := s.rec.Registry()
	reg.MustRegister(refused)
	reasons := []string{grpcguard.RefusedCalls, grpcguard.RefusedClientCalls, grpcguard.RefusedWaiting,
		grpcguard.RefusedClientWaiting, grpcguard.CancelledEvicted, grpcguard.CancelledNoMessage}
	if g.ResetLimits.on() {
		reasons = append(reasons, grpcguard.CutResets, grpcguard.CutListenerResets, grpcguard.CutCooldown)
	}
	for _, reason := range reasons {
		refused.WithLabelValues(reason) // at 0 from the start
	}
	adm := grpcguard.NewAdmission(grpcguard.AdmissionOptions{
		MaxCalls:            g.MaxCalls,
		MaxCallsPerClient:   g.MaxCallsPerClient,
		MaxWaiting:          g.MaxWaitingCalls,
		MaxWaitingPerClient: g.MaxWaitingCallsPerClient,
		MessageTimeout:      g.RequestMessageTimeout,
		OnRefuse:            func(reason string) { refused.WithLabelValues(reason).Inc() },
	})
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_grpc_calls_in_flight", Help: "gRPC calls in flight (connections.grpc.max_calls)."},
			func() float64 { n, _ := adm.Counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_grpc_calls_waiting", Help: "gRPC calls whose request message has not arrived (connections.grpc.max_waiting_calls)."},
			func() float64 { _, n := adm.Counts(); return float64(n) }),
	)
	s.admission = adm
	opts := adm.ServerOptions()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	if g.ResetLimits.on() {
		resets := grpcguard.NewResets(g.ResetLimits.options(func(reason string) { refused.WithLabelValues(reason).Inc() }))
		creds = resets.Credentials(creds)
	}
	return append(opts, grpc.Creds(creds))
}
