package server

import (
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
)

// Connections bounds what one connection, and one client, can hold on every
// listener: timeouts on the HTTP listeners (http, admin, gateway), caps on
// concurrent connections per listener and per client address, and the gRPC
// transport's keepalive enforcement and stream cap. The meaning and the
// defaults of every field are documented in default.yaml.
type Connections struct {
	// ReadHeaderTimeout bounds reading a request's header.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// MinBodyRate (bytes per second) sizes the default ReadTimeout.
	MinBodyRate int64 `yaml:"min_body_rate"`
	// ReadTimeout bounds reading a whole request, body included, on the
	// http and admin listeners; 0 means ReadHeaderTimeout +
	// max_body_bytes / MinBodyRate.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a response on the http and admin listeners.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// GatewayReadTimeout and GatewayWriteTimeout are the gateway's read and
	// write timeouts: its bodies go upstream, so they are sized separately.
	GatewayReadTimeout  time.Duration `yaml:"gateway_read_timeout"`
	GatewayWriteTimeout time.Duration `yaml:"gateway_write_timeout"`
	// MaxConns caps the connections one listener holds open; MaxConnsPerClient
	// caps those from one client IP address. 0 means no cap.
	MaxConns          int `yaml:"max_conns"`
	MaxConnsPerClient int `yaml:"max_conns_per_client"`
	// GRPC holds the gRPC transport's own bounds.
	GRPC GRPCLimits `yaml:"grpc"`
	// HTTP2 bounds stream resets on the HTTP listeners that serve HTTP/2
	// (http, admin and gateway, with TLS).
	HTTP2 ResetLimits `yaml:"http2"`
}

// ResetLimits bound the HTTP/2 streams a listener's clients reset, or make
// the server reset: per client IP address and for the listener as a whole.
// See grpcguard.ResetOptions.
type ResetLimits struct {
	// MaxResets, ResetsPerSecond and ResetCooldown: each client address
	// may reset MaxResets streams in a row, earning a reset per stream
	// that completes and ResetsPerSecond a second (MaxResets 0: no bound
	// per address).
	MaxResets       int           `yaml:"max_resets"`
	ResetsPerSecond float64       `yaml:"resets_per_second"`
	ResetCooldown   time.Duration `yaml:"reset_cooldown"`
	// MaxListenerResets and ListenerResetsPerSecond are the same for the
	// listener, every address together, earning a tenth of a reset per
	// stream that completes (MaxListenerResets 0: no listener-wide bound).
	MaxListenerResets       int     `yaml:"max_listener_resets"`
	ListenerResetsPerSecond float64 `yaml:"listener_resets_per_second"`
	// FreeCancelAfter: a call cancelled at least this long after its
	// request arrived complete spends nothing (0: every one spends).
	FreeCancelAfter time.Duration `yaml:"free_cancel_after"`
}

// on reports whether any reset bound is set.
func (l ResetLimits) on() bool { return l.MaxResets > 0 || l.MaxListenerResets > 0 }

// Resets earned per stream that completes (the whole request, then the
// whole answer): a client address that resets fewer than half of its
// streams, and a listener whose clients reset fewer than about a tenth of
// theirs, never run out.
const (
	streamCredit         = 1
	listenerStreamCredit = 0.1
)

// options are the grpcguard options for l, reporting cuts to onCut.
func (l ResetLimits) options(onCut func(string)) grpcguard.ResetOptions {
	return grpcguard.ResetOptions{
		Budget: float64(l.MaxResets), StreamCredit: streamCredit, RefillPerSecond: l.ResetsPerSecond, Cooldown: l.ResetCooldown,
		ListenerBudget: float64(l.MaxListenerResets), ListenerStreamCredit: listenerStreamCredit,
		ListenerRefillPerSecond: l.ListenerResetsPerSecond,
		FreeCancelAfter:         l.FreeCancelAfter, OnCut: onCut,
	}
}

// validate checks l, the section at key.
func (l ResetLimits) validate(key string, at func(string) string) error {
	if l.MaxResets < 0 || l.MaxListenerResets < 0 {
		return fmt.Errorf("%s: %s.max_resets and max_listener_resets must not be negative (0 means no bound)", at(key), key)
	}
	for _, r := range []float64{l.ResetsPerSecond, l.ListenerResetsPerSecond} {
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("%s: %s.resets_per_second and listener_resets_per_second must be finite and not negative", at(key), key)
		}
	}
	if l.ResetCooldown < 0 || l.FreeCancelAfter < 0 {
		return fmt.Errorf("%s: %s.reset_cooldown and free_cancel_after must not be negative", at(key), key)
	}
	return nil
}

// GRPCLimits bounds the gRPC listener's connections.
type GRPCLimits struct {
	// MaxConcurrentStreams caps the calls in flight on one connection.
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// HandshakeTimeout bounds a new connection's setup (TLS and the HTTP/2
	// preface): a connection that sends nothing is closed after it.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// KeepaliveMinTime is the shortest interval between a client's pings
	// the server accepts; a client that pings more often is disconnected.
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// KeepaliveTime and KeepaliveTimeout: after KeepaliveTime without
	// activity the server pings, and closes the connection if the ping is
	// not answered within KeepaliveTimeout.
	KeepaliveTime    time.Duration `yaml:"keepalive_time"`
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// MaxConnectionIdle closes a connection without calls for this long.
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
	// MaxCalls and MaxCallsPerClient cap the calls in flight on the
	// listener, in all and from one client IP address (0: no cap).
	MaxCalls          int `yaml:"max_calls"`
	MaxCallsPerClient int `yaml:"max_calls_per_client"`
	// MaxWaitingCalls and MaxWaitingCallsPerClient cap the calls whose
	// request message has not arrived yet (0: no cap), and
	// RequestMessageTimeout cancels such a call after this long (0: never).
	MaxWaitingCalls          int           `yaml:"max_waiting_calls"`
	MaxWaitingCallsPerClient int           `yaml:"max_waiting_calls_per_client"`
	RequestMessageTimeout    time.Duration `yaml:"request_message_timeout"`
	// ResetLimits bound stream resets (rapid reset, MadeYouReset).
	ResetLimits `yaml:",inline"`
}

// httpReadTimeout is the read timeout of the http and admin listeners: the
// configured one, or the time to read the largest legal body at the
// slowest accepted rate after the header.
func (c *Config) httpReadTimeout() time.Duration {
	if c.Connections.ReadTimeout > 0 {
		return c.Connections.ReadTimeout
	}
	n := c.Connections
	body := time.Duration(math.Ceil(float64(c.MaxBodyBytes) / float64(n.MinBodyRate) * float64(time.Second)))
	return n.ReadHeaderTimeout + body
}

// grpcOptions are the gRPC server options that enforce c.
func (c Connections) grpcOptions() []grpc.ServerOption {
	g := c.GRPC
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(g.MaxConcurrentStreams),
		grpc.ConnectionTimeout(g.HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:              g.KeepaliveTime,
			Timeout:           g.KeepaliveTimeout,
			MaxConnectionIdle: g.MaxConnectionIdle,
		}),
	}
}

// validate checks the section; at locates a key in the file.
func (c Connections) validate(at func(string) string) error {
	positive := []struct {
		key string
		d   time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout},
		{"write_timeout", c.WriteTimeout},
		{"idle_timeout", c.IdleTimeout},
		{"gateway_read_timeout", c.GatewayReadTimeout},
		{"gateway_write_timeout", c.GatewayWriteTimeout},
		{"grpc.handshake_timeout", c.GRPC.HandshakeTimeout},
		{"grpc.keepalive_min_time", c.GRPC.KeepaliveMinTime},
		{"grpc.keepalive_time", c.GRPC.KeepaliveTime},
		{"grpc.keepalive_timeout", c.GRPC.KeepaliveTimeout},
		{"grpc.max_connection_idle", c.GRPC.MaxConnectionIdle},
	}
	for _, p := range positive {
		if p.d <= 0 {
			return fmt.Errorf("%s: connections.%s must be positive, got %v", at("connections."+p.key), p.key, p.d)
		}
	}
	if c.ReadTimeout < 0 {
		return fmt.Errorf("%s: connections.read_timeout must not be negative (0 means computed)", at("connections.read_timeout"))
	}
	if c.MinBodyRate < 1 {
		return fmt.Errorf("%s: connections.min_body_rate must be at least 1 byte per second, got %d", at("connections.min_body_rate"), c.MinBodyRate)
	}
	if c.MaxConns < 0 || c.MaxConnsPerClient < 0 {
		return fmt.Errorf("%s: connections.max_conns and max_conns_per_client must not be negative (0 means no cap)", at("connections"))
	}
	g := c.GRPC
	if g.MaxCalls < 0 || g.MaxCallsPerClient < 0 || g.MaxWaitingCalls < 0 || g.MaxWaitingCallsPerClient < 0 {
		return fmt.Errorf("%s: connections.grpc.max_calls, max_calls_per_client, max_waiting_calls and max_waiting_calls_per_client must not be negative (0 means no cap)", at("connections.grpc"))
	}
	if g.RequestMessageTimeout < 0 {
		return fmt.Errorf("%s: connections.grpc.request_message_timeout must not be negative", at("connections.grpc"))
	}
	if err := g.ResetLimits.validate("connections.grpc", at); err != nil {
		return err
	}
	if err := c.HTTP2.validate("connections.http2", at); err != nil {
		return err
	}
	if g.MaxConcurrentStreams < 1 {
		return fmt.Errorf("%s: connections.grpc.max_concurrent_streams must be at least 1", at("connections.grpc.max_concurrent_streams"))
	}
	return nil
}
