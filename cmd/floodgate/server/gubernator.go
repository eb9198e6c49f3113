package server

import (
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
)

// An Option changes how New builds a Server, beyond its Config.
type Option func(*options)

type options struct {
	clock func() time.Time
}

// WithClock makes the server read the time from now instead of time.Now:
// the time of rule decisions and of gubernator's API (created_at and
// calendar periods), of the distributed node, and with a Redis store the
// time its scripts judge by (redisstore.Options.ClientTime) instead of
// Redis's own. Tests that run the server beside another system on one
// virtual clock use it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// buildGubernator builds gubernator's API (gRPC service and HTTP paths) on
// the server's store, unless gubernator.enabled is off.
func (s *Server) buildGubernator() {
	g := s.cfg.Gubernator
	if !g.Enabled {
		return
	}
	policy, _ := g.FailurePolicy() // checked by validate
	o := gubernator.Options{
		Store:     s.tracing.Store(s.store),
		Clock:     s.clock,
		OnFailure: policy,
		Ready:     s.Ready,
		Advertise: func() string { return s.Addr(ListenerGRPC) },
	}
	if s.node != nil {
		// The node count its shares are computed with: live with
		// arrangement.nodes 0.
		o.Peers = func() int { return s.node.Health().Nodes }
	}
	s.guber = gubernator.New(o)
}
