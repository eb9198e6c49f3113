package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/redisstore"
)

// The node's arrangement across nodes and regions: its live membership
// (arrangement.membership) and its region (arrangement.region).

// region returns the node's Region: with a region name, one of
// 1 + len(Others) regions.
func (a Arrangement) region() *distributed.Region {
	if a.Region.Name == "" {
		return nil
	}
	return &distributed.Region{Regions: 1 + len(a.Region.Others), LinkTimeout: a.Region.LinkTimeout}
}

// membership returns the node's Membership: with nodes: 0 it counts the
// live nodes, else none.
func (a Arrangement) membership() *distributed.Membership {
	if a.Nodes != 0 {
		return nil
	}
	m := a.Membership
	return &distributed.Membership{Group: m.Group, Period: m.Period, Expiry: m.Expiry, Assume: m.Assume}
}

// buildExchange connects to the other regions' Redis and makes the
// exchange that forwards this region's counts to them (run by Serve); it
// does nothing without arrangement.region.
func (s *Server) buildExchange(ctx context.Context, local *redisstore.Store) error {
	reg := s.cfg.Arrangement.Region
	if reg.Name == "" {
		return nil
	}
	remotes := map[string]*redisstore.Store{}
	for _, r := range reg.Others {
		st := r.Store
		st.Prefix = s.cfg.Store.Prefix
		// FLOODGATE_REDIS_PASSWORD is this region's: never sent elsewhere.
		o, err := st.RedisOptions(func(string) string { return "" })
		if err != nil {
			return fmt.Errorf("region %s's store %s: %w", r.Name, st.Address(), err)
		}
		o.ConnectLater = true
		rs, err := redisstore.New(ctx, o)
		if err != nil {
			return fmt.Errorf("region %s's store %s: %w", r.Name, o.Address(), err)
		}
		s.remotes = append(s.remotes, rs)
		remotes[r.Name] = rs
	}
	x, err := redisstore.NewExchange(local, redisstore.ExchangeOptions{Region: reg.Name, Remotes: remotes,
		Interval: reg.Exchange, Logger: s.log})
	if err != nil {
		return err
	}
	s.exchange = x
	return nil
}

// startExchange runs the exchange, if any, until ctx ends.
func (s *Server) startExchange(ctx context.Context, wg *sync.WaitGroup) {
	if s.exchange == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.exchange.Run(ctx)
	}()
}

// closeRemotes closes the other regions' stores.
func (s *Server) closeRemotes() {
	for _, r := range s.remotes {
		r.Close()
	}
	s.remotes, s.exchange = nil, nil
}
