// Package redisstore keeps Floodgate's counters in Redis or Redis Cluster.
//
// Every algorithm of package algorithm runs inside Redis as one Lua script
// (its parts under lua/, one file per algorithm) that mirrors the Go code with time in microseconds, so a
// decision is one atomic EVALSHA: read the key's state, decide, write the
// state back with a TTL. By default the script reads the Redis server's
// clock (TIME), so limiter nodes with skewed clocks agree; Options.ClientTime
// makes it use the caller's time instead, for the simulator and tests.
//
// A Store implements store.Store (Decide, DecideOne, Release) and
// store.Syncer (Sync, one round trip per Redis node for any number of keys).
// New dials Redis as Options say; NewWithClient uses a rueidis client the
// application already holds.
//
// Keys have the form
//
//	<prefix>:{<limit>}:<key>
//
// where <limit> is a hash of the counter the limit counts in (its Config's
// Identity for the windows, buckets and GCRA, so that limits of one Counter
// share each key; else its whole Config), so other limits never share
// state and all keys of one limit hash to one Cluster slot
// (Options.SlotsPerLimit can spread them), and
// <key> is the request's key with every byte outside [A-Za-z0-9-_.] escaped
// as %XX (long keys are replaced by # and their SHA-256), so no key can reach
// another's. See docs/redis.md (operating it) and docs/design.md (why).
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Defaults for Options fields left zero.
const (
	DefaultPrefix  = "fg"
	DefaultTimeout = time.Second
	// maxBatchKeys bounds the keys of one script call in Sync, so one call
	// does not hold Redis for long.
	maxBatchKeys = 256
	// maxBatchEvents bounds the events of one script call in Sync.
	maxBatchEvents = 4096
	// maxPlainKey is the longest escaped key kept readable; longer keys are
	// hashed.
	maxPlainKey = 128
)

// Options configures a Store.
type Options struct {
	// Addrs are Redis addresses, host:port. For a cluster, any subset of its
	// nodes; the rest are discovered.
	Addrs []string
	// Cluster says the addresses are Redis Cluster nodes.
	Cluster bool
	// SentinelMaster, if set, is the name under which Redis Sentinel
	// monitors the master; Addrs are then the sentinels' addresses, and
	// the store follows the master across failovers.
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// if they need it (Username and Password are for the master).
	SentinelUsername, SentinelPassword string
	// ClientTime makes the scripts use the time the caller passes instead
	// of the Redis server's clock. The simulator and tests use it; in
	// production leave it false, so that nodes with skewed clocks agree.
	ClientTime bool
	// Prefix starts every key (default "fg"). It must not contain '{' or '}'.
	Prefix string
	// Timeout bounds each call when ctx has no earlier deadline (default 1s).
	Timeout time.Duration
	// Username and Password authenticate, if set.
	Username, Password string
	// DB selects a database on a single server.
	DB int
	// TLS, if set, makes connections use TLS with this configuration
	// (to the sentinels too).
	TLS *tls.Config
	// TTLSlack is added to every key's TTL beyond its algorithm's
	// IdleAfter (default 1s; with ClientTime, 1m, since the caller's clock
	// may run apart from Redis's).
	TTLSlack time.Duration
	// SlotsPerLimit spreads the keys of one limit over that many Redis
	// Cluster hash tags (by a hash of the request key), so that one heavily
	// used limit is served by several masters. The default, 1, keeps every
	// key of a limit in one slot. Changing it moves every key: counts start
	// again from zero.
	SlotsPerLimit int
	// ConnectLater lets New succeed while Redis is unreachable: calls then
	// fail with ErrNotConnected (at once, without waiting) and the store
	// tries to connect again at most every ReconnectEvery. A limiter node
	// can then start during a Redis outage and fail open or closed per rule.
	ConnectLater bool
	// ReconnectEvery spaces connection attempts in ConnectLater mode
	// (default 1s).
	ReconnectEvery time.Duration
	// Outbox names the other regions whose Redis this region's counts are
	// forwarded to (see Exchange): every push (SyncOnce) also queues its
	// counts for each of them, in the Redis of this region. Empty: no
	// regions.
	Outbox []string
}

// Store is a counter store in Redis. It is safe for concurrent use.
type Store struct {
	conn       atomic.Pointer[rueidis.Client]
	copt       rueidis.ClientOption
	every      time.Duration
	dialMu     sync.Mutex // guards the four fields below
	dialed     time.Time  // start of the last connection attempt
	dialErr    error      // its error
	dialing    bool       // an attempt is in flight
	closed     bool
	borrowed   bool   // the client is the caller's: Close leaves it open
	addr       string // Options.Address(): no password
	cluster    bool
	clientTime bool
	spread     int
	prefix     string
	outbox     []string // Options.Outbox
	tags       sync.Map // hash tags listed for the exchange (outbox.go)
	tagsListed atomic.Int64
	timeout    time.Duration
	slack      time.Duration
	specMu     sync.RWMutex
	specs      map[algorithm.Config]specEntry
	loads      scriptLoads
	batchers   sync.Map // batchGroup -> *batcher
	// owners is the Cluster's slot map (see owners.go); ownersTried the
	// time of the last read started, in Unix nanoseconds; primaries each
	// primary's index in owners, stable across reads.
	owners      atomic.Pointer[owners]
	ownersTried atomic.Int64
	primariesMu sync.Mutex
	primaries   map[string]uint16
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.OnceSyncer = (*Store)(nil)
)

// ErrNotConnected is returned, wrapped with the last connection error, by a
// ConnectLater store that has not reached Redis yet.
var ErrNotConnected = errors.New("redisstore: not connected to Redis")

// New connects to Redis as o says and returns a Store. It fails if no
// address answers, unless o.ConnectLater is set.
func New(ctx context.Context, o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("redisstore: Options.Addrs is empty: give at least one host:port")
	}
	if err := o.fillKeyOptions(); err != nil {
		return nil, err
	}
	copt := rueidis.ClientOption{
		InitAddress:       o.Addrs,
		Username:          o.Username,
		Password:          o.Password,
		SelectDB:          o.DB,
		TLSConfig:         o.TLS,
		DisableCache:      true,
		DisableRetry:      true, // a script that may have run must not run twice
		ForceSingleClient: !o.Cluster && o.SentinelMaster == "",
		Dialer:            netDialer(o.Timeout),
		ConnWriteTimeout:  max(o.Timeout, time.Second),
	}
	if o.SentinelMaster != "" {
		if o.Cluster {
			return nil, errors.New("redisstore: Options.Cluster and Options.SentinelMaster exclude each other")
		}
		copt.Sentinel = rueidis.SentinelOption{
			MasterSet: o.SentinelMaster,
			Username:  o.SentinelUsername,
			Password:  o.SentinelPassword,
			TLSConfig: o.TLS,
			Dialer:    netDialer(o.Timeout),
			// Catch a missed +switch-master event within seconds.
			TopologyRefreshInterval: 2 * time.Second,
		}
	}
	if o.ReconnectEvery <= 0 {
		o.ReconnectEvery = time.Second
	}
	s := &Store{copt: copt, every: o.ReconnectEvery, addr: o.Address(), cluster: o.Cluster, clientTime: o.ClientTime, spread: o.SlotsPerLimit,
		prefix: o.Prefix, timeout: o.Timeout, slack: o.TTLSlack, outbox: slices.Clone(o.Outbox)}
	c, err := s.dial(ctx)
	switch {
	case err == nil:
		s.conn.Store(&c)
	case o.ConnectLater:
		s.dialErr, s.dialed = err, time.Now()
	default:
		return nil, err
	}
	return s, nil
}

// connect returns the client. Before the first connection (ConnectLater)
// it returns ErrNotConnected at once, and starts a connection attempt in
// the background if none has started in the last s.every.
func (s *Store) connect() (rueidis.Client, error) {
	if c := s.conn.Load(); c != nil {
		return *c, nil
	}
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	if c := s.conn.Load(); c != nil {
		return *c, nil
	}
	if !s.dialing && !s.closed && time.Since(s.dialed) >= s.every {
		s.dialing, s.dialed = true, time.Now()
		go func() {
			c, err := s.dial(context.Background())
			s.dialMu.Lock()
			defer s.dialMu.Unlock()
			s.dialing = false
			switch {
			case err != nil:
				s.dialErr = err
			case s.closed:
				c.Close()
			default:
				s.conn.Store(&c)
			}
		}()
	}
	if s.closed {
		return nil, errors.New("redisstore: store is closed")
	}
	return nil, fmt.Errorf("%w: %w", ErrNotConnected, s.dialErr)
}

// dial connects, checks that every node answers and loads the script on
// every node, so that the first decisions need no script text.
func (s *Store) dial(ctx context.Context) (rueidis.Client, error) {
	c, err := rueidis.NewClient(s.copt)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connecting to %s: %w", s.addr, err)
	}
	if s.cluster && c.Mode() != rueidis.ClientModeCluster {
		c.Close()
		return nil, fmt.Errorf("redisstore: Options.Cluster is set but %s is not a Redis Cluster", s.addr)
	}
	if err := ping(ctx, c, setupTimeout(s.timeout)); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstore: %s: %w", s.addr, err)
	}
	if err := s.prepare(ctx, c); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstore: %s: %w", s.addr, err)
	}
	return c, nil
}

// Address returns the store's address in ParseURL's syntax, without the
// password.
func (s *Store) Address() string { return s.addr }

// ConnectError returns why a ConnectLater store has not connected yet, or
// nil once it has. The error names the store by Address (no password).
func (s *Store) ConnectError() error {
	if s.conn.Load() != nil {
		return nil
	}
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	if s.dialErr == nil {
		return ErrNotConnected
	}
	return s.dialErr
}

// Ping checks that every Redis node answers and holds the script. A node
// that lost it (restarted, flushed, or a replica just promoted) gets it
// loaded again, and the connections opened again, before Ping returns, so
// that a server probing readiness repairs the store before traffic meets
// the loss.
func (s *Store) Ping(ctx context.Context) error {
	c, err := s.connect()
	if err != nil {
		return err
	}
	gen := s.loads.generation()
	if err := ping(ctx, c, s.timeout); err != nil {
		return err
	}
	missing, err := scriptMissing(ctx, c, s.timeout)
	if err != nil || !missing {
		return err
	}
	return s.loads.wait(ctx, gen, func(lctx context.Context) error { return s.prepare(lctx, c) })
}

func ping(ctx context.Context, c rueidis.Client, timeout time.Duration) error {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	for addr, n := range c.Nodes() {
		if err := n.Do(ctx, n.B().Ping().Build()).Error(); err != nil {
			return fmt.Errorf("redisstore: PING %s: %w", addr, err)
		}
	}
	return nil
}

// Close closes the connections.
func (s *Store) Close() error {
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	s.closed = true
	if c := s.conn.Swap(nil); c != nil && !s.borrowed {
		(*c).Close()
	}
	return nil
}

// deadline applies the store's timeout to ctx unless ctx ends sooner.
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return withTimeout(ctx, s.timeout)
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
