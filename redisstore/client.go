package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// NewWithClient returns a Store that sends its scripts through c, a
// rueidis client the caller built and keeps owning: the application's
// existing connections carry the limiter's calls, and Store.Close leaves c
// open. The Store loads its script on every node c knows before it
// returns, and fails if a node does not answer.
//
// c decides where and how to connect (single server, Sentinel or Cluster,
// TLS, credentials), so o may set only Prefix, Timeout, ClientTime,
// TTLSlack and SlotsPerLimit; a connection field (Addrs, Cluster,
// Sentinel*, Username, Password, DB, TLS, ConnectLater, ReconnectEvery) is
// an error. Leave rueidis's retries at their default (read-only commands
// only): a script that may have run must not run twice.
//
// An application on go-redis has no rueidis.Client to pass: it builds one
// for the same address with rueidis.NewClient, which multiplexes calls on
// one connection per Redis node, and passes that.
func NewWithClient(ctx context.Context, c rueidis.Client, o Options) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: NewWithClient needs a rueidis.Client, got nil")
	}
	if f := o.connectionField(); f != "" {
		return nil, fmt.Errorf("redisstore: NewWithClient: Options.%s is set, but the client decides how to connect: build the client with it", f)
	}
	if err := o.fillKeyOptions(); err != nil {
		return nil, err
	}
	o.Cluster = c.Mode() == rueidis.ClientModeCluster
	o.Addrs = slices.Sorted(maps.Keys(c.Nodes()))
	s := &Store{borrowed: true, addr: o.Address(), cluster: o.Cluster, clientTime: o.ClientTime, spread: o.SlotsPerLimit,
		prefix: o.Prefix, timeout: o.Timeout, slack: o.TTLSlack, outbox: slices.Clone(o.Outbox)}
	if err := ping(ctx, c, setupTimeout(s.timeout)); err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", s.addr, err)
	}
	if err := s.prepare(ctx, c); err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", s.addr, err)
	}
	s.conn.Store(&c)
	return s, nil
}

// connectionField names the first field of o that says how to connect, or
// returns "" if none is set.
func (o Options) connectionField() string {
	switch {
	case len(o.Addrs) > 0:
		return "Addrs"
	case o.Cluster:
		return "Cluster"
	case o.SentinelMaster != "" || o.SentinelUsername != "" || o.SentinelPassword != "":
		return "Sentinel*"
	case o.Username != "" || o.Password != "":
		return "Username/Password"
	case o.DB != 0:
		return "DB"
	case o.TLS != nil:
		return "TLS"
	case o.ConnectLater || o.ReconnectEvery != 0:
		return "ConnectLater/ReconnectEvery"
	}
	return ""
}

// fillKeyOptions checks the options that shape keys and calls and fills
// their defaults.
func (o *Options) fillKeyOptions() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q contains '{' or '}', which would change the Cluster hash tag", o.Prefix)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TTLSlack <= 0 {
		o.TTLSlack = time.Second
		if o.ClientTime {
			o.TTLSlack = time.Minute
		}
	}
	if o.SlotsPerLimit < 0 || o.SlotsPerLimit > 16384 {
		return fmt.Errorf("redisstore: SlotsPerLimit must be between 1 and 16384, got %d", o.SlotsPerLimit)
	}
	for i, r := range o.Outbox {
		if err := checkRegion(r); err != nil {
			return err
		}
		if slices.Contains(o.Outbox[:i], r) {
			return fmt.Errorf("redisstore: region %q is named twice in Outbox", r)
		}
	}
	return nil
}
