package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/redisstore"
)

// connectRedis opens the Redis store the configuration names and logs one
// line saying where it is (without credentials) and whether it answered.
// The store is opened with ConnectLater: a node that starts during a Redis
// outage, or with a wrong password, serves (each rule deciding by its
// failure policy, /readyz answering 503) and connects once Redis answers.
func (s *Server) connectRedis(ctx context.Context) (*redisstore.Store, error) {
	o, err := s.cfg.Store.RedisOptions(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", s.cfg.Store.Address(), err)
	}
	o.ConnectLater = true
	for _, r := range s.cfg.Arrangement.Region.Others {
		o.Outbox = append(o.Outbox, r.Name)
	}
	// A clock of WithClock is the decisions' time in Redis too, instead of
	// Redis's own (tests running beside another system on a virtual clock).
	o.ClientTime = s.clock != nil
	rs, err := redisstore.New(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", o.Address(), err)
	}
	if err := rs.ConnectError(); err != nil {
		s.log.Error("store does not answer; rules decide by their failure policy and /readyz answers 503 until it does",
			"store", rs.Address(), "arrangement", s.arrangement(), "err", err)
	} else {
		s.log.Info("store connected", "store", rs.Address(), "arrangement", s.arrangement())
	}
	return rs, nil
}

// arrangement names how this node shares counters: "local" for the memory
// store, else the configured arrangement.
func (s *Server) arrangement() string {
	if s.cfg.Store.Type == StoreMemory {
		return "local"
	}
	return string(s.cfg.Arrangement.Mode)
}

// currentError returns the node's last store error if the store has not
// answered since, else "": the status page's detail clears when Redis
// recovers.
func currentError(h distributed.Health, now time.Time) string {
	if h.LastError == "" || h.LastErrorAt.Before(now.Add(-h.SyncLag)) {
		return ""
	}
	return h.LastError
}
