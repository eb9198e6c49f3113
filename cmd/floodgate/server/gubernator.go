package server

import (
	"time"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
	"github.com/floodgate-dev/floodgate/store"
)

// An Option changes how New builds a Server, beyond its Config.
type Option func(*options)

type options struct {
	clock func() time.Time
}

// WithClock makes the server read the time from now instead of time.Now:
// the time of rule decisions and of gubernator's API (created_at and
// calendar periods). Tests that run the server beside another system on
// one virtual clock use it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// buildGubernator builds gubernator's API (gRPC service and HTTP paths) on
// the server's store.
func (s *Server) buildGubernator() {
	o := gubernator.Options{
		Store:     s.tracing.Store(s.store),
		Clock:     s.clock,
		OnFailure: store.FailOpen,
		Ready:     s.Ready,
		Peers:     1,
		Advertise: func() string { return s.Addr(ListenerGRPC) },
	}
	if s.redis != nil {
		o.Peers = s.cfg.Arrangement.Nodes
		// The Redis script has no twin of gubernator's algorithm yet.
		o.Unsupported = "gubernator's API decides on the memory store only (store.type: memory); this server uses " + s.cfg.Store.Type
	}
	s.guber = gubernator.New(o)
}
