package server

import (
	"fmt"
	"time"

	gubernatoralg "github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/store"
)

// Gubernator configures gubernator's API (V1/GetRateLimits and
// V1/HealthCheck on the gRPC listener, their HTTP paths on the HTTP one).
type Gubernator struct {
	// Enabled serves the API; off, its gRPC service is not registered and
	// its HTTP paths are the JSON API's (404).
	Enabled bool `yaml:"enabled"`
	// OnFailure is the failure policy of its requests while a shared store
	// cannot answer: open, closed or local.
	OnFailure string `yaml:"on_failure"`
	// Version is the gubernator release whose answers to give: v2.21 (the
	// default, gubernator v2.21.0) or v2.13 (v2.13.0).
	Version string `yaml:"version"`
	// ScheduleMaxWait caps the wait a max_wait request can book
	// (gubernator's GUBER_SCHEDULE_MAX_WAIT); 0 means its default, 5m.
	ScheduleMaxWait time.Duration `yaml:"schedule_max_wait"`
}

// FailurePolicy returns OnFailure as a store.FailurePolicy, and whether it
// names one.
func (g Gubernator) FailurePolicy() (store.FailurePolicy, bool) {
	switch g.OnFailure {
	case "open":
		return store.FailOpen, true
	case "closed":
		return store.FailClosed, true
	case "local":
		return store.FailLocal, true
	}
	return store.FailOpen, false
}

// Versions of gubernator.version, the newest first.
var gubernatorVersions = map[string]gubernatoralg.Version{"v2.21": gubernatoralg.V221, "v2.13": gubernatoralg.V213}

// AlgorithmVersion returns Version as the algorithm's, and whether it names
// one ("" is the newest).
func (g Gubernator) AlgorithmVersion() (gubernatoralg.Version, bool) {
	if g.Version == "" {
		return gubernatoralg.V221, true
	}
	v, ok := gubernatorVersions[g.Version]
	return v, ok
}

func (g Gubernator) validate(at func(string) string) error {
	if _, ok := g.FailurePolicy(); !ok {
		return fmt.Errorf("%s: gubernator.on_failure %q: want open, closed or local", at("gubernator.on_failure"), g.OnFailure)
	}
	if _, ok := g.AlgorithmVersion(); !ok {
		return fmt.Errorf("%s: gubernator.version %q: want v2.21 or v2.13", at("gubernator.version"), g.Version)
	}
	if g.ScheduleMaxWait < 0 {
		return fmt.Errorf("%s: gubernator.schedule_max_wait must not be negative", at("gubernator.schedule_max_wait"))
	}
	return nil
}

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
	policy, _ := g.FailurePolicy()     // checked by validate
	version, _ := g.AlgorithmVersion() // likewise
	o := gubernator.Options{
		Store:       s.tracing.Store(s.store),
		Clock:       s.clock,
		OnFailure:   policy,
		Ready:       s.Ready,
		Advertise:   func() string { return s.Addr(ListenerGRPC) },
		Version:     version,
		WaitCeiling: g.ScheduleMaxWait,
	}
	if s.node != nil && s.cfg.Arrangement.Mode != distributed.Centralized {
		// A booking is a debt only the key's one decider can keep (regions
		// take delayed or split too).
		o.NoSchedule = fmt.Sprintf("with arrangement.mode %s (only centralized decides each request where its key is kept)", s.cfg.Arrangement.Mode)
	}
	if s.node != nil {
		// The node count its shares are computed with: live with
		// arrangement.nodes 0.
		o.Peers = func() int { return s.node.Health().Nodes }
	}
	s.guber = gubernator.New(o)
}
