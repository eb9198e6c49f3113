package server

import (
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
)

// limitConns wraps a bound listener in the configured connection caps and
// counts what they refuse in floodgate_connections_refused_total.
func (s *Server) limitConns(name string, ln net.Listener) net.Listener {
	c := s.cfg.Connections
	if c.MaxConns == 0 && c.MaxConnsPerClient == 0 {
		return ln
	}
	refused := s.connRefused()
	for _, reason := range []string{connlimit.RefusedListenerFull, connlimit.RefusedClientFull, connlimit.EvictedForNewClient} {
		refused.WithLabelValues(name, reason) // at 0 from the start
	}
	ll := connlimit.New(ln, name, c.MaxConns, c.MaxConnsPerClient, s.log, func(reason string) {
		refused.WithLabelValues(name, reason).Inc()
	})
	s.capped[name] = ll
	return ll
}

// connRefused returns floodgate_connections_refused_total, registering it
// on first use.
func (s *Server) connRefused() *prometheus.CounterVec {
	s.refusedOnce.Do(func() {
		s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_connections_refused_total",
			Help: "Connections closed by a connection cap: refused at once (listener_full, client_full) or closed to make room for a client with fewer (evicted); and HTTP/2 connections cut off for stream resets, their address's (resets) or the listener's (listener_resets), or refused or cut during a client's reset cooldown (cooldown).",
		}, []string{"listener", "reason"})
		s.rec.Registry().MustRegister(s.refused)
	})
	return s.refused
}
