package server

import (
	"context"
	"crypto/tls"
	"net/http"

	"golang.org/x/net/http2"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
)

// guardHTTP2 has hs, the server of the TLS listener called name, serve
// HTTP/2 over connections watched by the stream-reset budgets of
// connections.http2 (a client resetting streams, or making the server
// reset them, past its address's budget or the listener's is sent GOAWAY
// and cut off). The watch reads HTTP/2 frames, so it sits after TLS: the
// connection is handed to golang.org/x/net/http2's server (net/http's own
// HTTP/2 server, unbundled) once TLS has chosen h2. Cuts are counted in
// floodgate_connections_refused_total.
func (s *Server) guardHTTP2(name string, hs *http.Server) error {
	l := s.cfg.Connections.HTTP2
	if !l.on() {
		return nil
	}
	refused := s.connRefused()
	for _, reason := range []string{grpcguard.CutResets, grpcguard.CutListenerResets, grpcguard.CutCooldown} {
		refused.WithLabelValues(name, reason) // at 0 from the start
	}
	resets := grpcguard.NewResets(l.options(func(reason string) { refused.WithLabelValues(name, reason).Inc() }))
	//lint:ignore SA1019 net/http has no hook to watch an HTTP/2 connection's frames after TLS; x/net/http2 is the same server, unbundled
	h2 := &http2.Server{}
	//lint:ignore SA1019 net/http has no hook to watch an HTTP/2 connection's frames after TLS; x/net/http2 is the same server, unbundled
	if err := http2.ConfigureServer(hs, h2); err != nil { // also shuts HTTP/2 connections down with hs
		return err
	}
	hs.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		w, err := resets.Watch(c)
		if err != nil {
			return // cooling down: closed
		}
		//lint:ignore SA1019 net/http has no hook to watch an HTTP/2 connection's frames after TLS; x/net/http2 is the same server, unbundled
		opts := &http2.ServeConnOpts{Handler: h, BaseConfig: hs}
		// net/http passes the connection's base context through the
		// handler, as it does to its own HTTP/2 server.
		if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
			opts.Context = bc.BaseContext()
		}
		//lint:ignore SA1019 net/http has no hook to watch an HTTP/2 connection's frames after TLS; x/net/http2 is the same server, unbundled
		h2.ServeConn(w, opts)
	}
	return nil
}
