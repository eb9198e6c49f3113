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
// where <limit> is a hash of the algorithm's whole Config, so two limits
// never share state and all keys of one limit hash to one Cluster slot
// (Options.SlotsPerLimit can spread them), and
// <key> is the request's key with every byte outside [A-Za-z0-9-_.] escaped
// as %XX (long keys are replaced by # and their SHA-256), so no key can reach
// another's. See docs/redis.md.
package redisstore

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
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
		prefix: o.Prefix, timeout: o.Timeout, slack: o.TTLSlack}
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

// specFor returns the script spec of a, building and caching it.
func (s *Store) specFor(a algorithm.Algorithm) (*spec, error) {
	if a == nil {
		return nil, store.ErrNoAlgorithm
	}
	c := a.Config()
	s.specMu.RLock()
	e, ok := s.specs[c]
	s.specMu.RUnlock()
	if !ok {
		e.sp, e.err = newSpec(a, s.slack)
		s.specMu.Lock()
		if s.specs == nil {
			s.specs = make(map[algorithm.Config]specEntry)
		}
		s.specs[c] = e
		s.specMu.Unlock()
	}
	return e.sp, e.err
}

// specEntry is a cached spec, or the reason an algorithm has none.
type specEntry struct {
	sp  *spec
	err error
}

// Key returns the Redis key that holds the state of key under a's limit.
func (s *Store) Key(a algorithm.Algorithm, key string) (string, error) {
	sp, err := s.specFor(a)
	if err != nil {
		return "", err
	}
	return s.key(sp, key), nil
}

func (s *Store) key(sp *spec, key string) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(sp.tag) + 5 + len(key))
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(sp.tag)
	if s.spread > 1 {
		h := fnv.New32a()
		h.Write([]byte(key))
		b.WriteByte('.')
		b.WriteString(strconv.FormatUint(uint64(h.Sum32()%uint32(s.spread)), 10))
	}
	b.WriteString("}:")
	writeKey(&b, key)
	return b.String()
}

// writeKey writes key escaped: bytes outside [A-Za-z0-9-_.] become %XX. An
// escaped key longer than maxPlainKey is written as '#' and the hex SHA-256
// of key instead. '%' and '#' are always escaped, so the two forms never
// meet and distinct keys give distinct names.
func writeKey(b *strings.Builder, key string) {
	n := 0
	for i := 0; i < len(key); i++ {
		if plain(key[i]) {
			n++
		} else {
			n += 3
		}
	}
	if n > maxPlainKey {
		h := sha256.Sum256([]byte(key))
		b.WriteByte('#')
		b.WriteString(hex.EncodeToString(h[:]))
		return
	}
	const hexdigits = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.'
}

// now returns the script's time argument: the caller's time in whole
// microseconds, or "" for the server's clock.
func (s *Store) now(now int64) string {
	if !s.clientTime {
		return ""
	}
	return itoa(floorDiv(now, usec))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// call is one script invocation.
type call struct {
	keys []string
	args []string
}

// exec runs the calls in one pipeline (one round trip per node), by SHA.
// Calls refused with NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover) wait for one SCRIPT LOAD per node, shared by every caller and
// finished in the background even if they give up, and are sent again by
// SHA; only if the script is still missing then is its text sent. Calls
// refused with TRYAGAIN (a multi-key call during a slot migration) are
// retried shortly. Neither error means the script ran, so neither retry
// can count twice.
func (s *Store) exec(ctx context.Context, calls []call) ([]rueidis.RedisResult, error) {
	client, err := s.connect()
	if err != nil {
		return nil, err
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	gen := s.loads.generation()
	var res []rueidis.RedisResult
	if len(cmds) == 1 {
		res = []rueidis.RedisResult{client.Do(ctx, cmds[0])}
	} else {
		res = client.DoMulti(ctx, cmds...)
	}
	for attempt := 0; ; attempt++ {
		var again []int
		var redo rueidis.Commands
		reloaded := false
		for i, r := range res {
			rerr, ok := rueidis.IsRedisErr(r.Error())
			if !ok {
				continue
			}
			switch {
			case rerr.IsNoScript() && attempt == 0:
				if !reloaded {
					if err := s.reload(ctx, client, gen); err != nil {
						return nil, err
					}
					reloaded = true
				}
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			case rerr.IsNoScript():
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Eval().Script(script).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			case rerr.IsTryAgain() && attempt < 20:
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			}
		}
		if len(redo) == 0 {
			break
		}
		if attempt > 0 && !reloaded {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("redisstore: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		if len(redo) == 1 {
			res[again[0]] = client.Do(ctx, redo[0])
			continue
		}
		for j, r := range client.DoMulti(ctx, redo...) {
			res[again[j]] = r
		}
	}
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
	}
	return res, nil
}

// request is a store.Request with its spec and Redis key resolved.
type request struct {
	sp  *spec
	key string
}

func (s *Store) resolve(reqs []store.Request) ([]request, error) {
	rs := make([]request, len(reqs))
	for i := range reqs {
		sp, err := s.specFor(reqs[i].Algorithm)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		rs[i] = request{sp: sp, key: s.key(sp, reqs[i].Key)}
	}
	return rs, nil
}

// decideCall builds one script call deciding reqs[idx...] with op.
func (s *Store) decideCall(op, now string, reqs []store.Request, rs []request, idx []int) call {
	c := call{keys: make([]string, 0, len(idx)), args: make([]string, 0, 2+len(idx)*10)}
	c.args = append(c.args, op, now)
	for _, i := range idx {
		c.keys = append(c.keys, rs[i].key)
		c.args = append(c.args, rs[i].sp.header...)
		shadow := "0"
		if reqs[i].Shadow {
			shadow = "1"
		}
		c.args = append(c.args, itoa(reqs[i].Cost), shadow)
	}
	return c
}

var reasons = [...]algorithm.Reason{"", algorithm.ReasonOverLimit, algorithm.ReasonCostOverLimit,
	algorithm.ReasonQueueFull, algorithm.ReasonBadCost}

// decisions parses a 'd' or 'p' reply into out[idx...].
func decisions(r rueidis.RedisResult, rs []request, idx []int, out []algorithm.Decision) error {
	v, err := r.AsIntSlice()
	if err != nil {
		return fmt.Errorf("redisstore: reading decisions: %w", err)
	}
	if len(v) != 6*len(idx) {
		return fmt.Errorf("redisstore: script returned %d values for %d decisions", len(v), len(idx))
	}
	return decodeDecisions(v, rs, idx, out)
}

// decodeDecisions reads six values per decision from v into out[idx...].
func decodeDecisions(v []int64, rs []request, idx []int, out []algorithm.Decision) error {
	for j, i := range idx {
		f := v[6*j : 6*j+6]
		if f[5] < 0 || f[5] >= int64(len(reasons)) {
			return fmt.Errorf("redisstore: script returned reason code %d", f[5])
		}
		out[i] = decision(f, rs[i].sp)
	}
	return nil
}

// DecideOne decides one request: alone in one EVALSHA when no call of its
// hash slot is in flight, else together with other concurrent DecideOne calls of its
// hash slot in one script call that decides each on its own (see batcher).
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	sp, err := s.specFor(req.Algorithm)
	if err != nil {
		return algorithm.Decision{}, err
	}
	if _, err := s.connect(); err != nil {
		return algorithm.Decision{}, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.decideBatched(ctx, now, req, sp, s.key(sp, req.Key))
}

// decideAlone decides one request in one EVALSHA of op 'd'.
func (s *Store) decideAlone(ctx context.Context, now int64, req store.Request, sp *spec, key string) (algorithm.Decision, error) {
	if floorMode != "" {
		return s.floorAlone(ctx, req, sp, key)
	}
	client, err := s.connect()
	if err != nil {
		return algorithm.Decision{}, err
	}
	shadow := "0"
	if req.Shadow {
		shadow = "1"
	}
	args := make([]string, 0, len(sp.header)+4)
	args = append(append(append(args, "d", s.now(now)), sp.header...), itoa(req.Cost), shadow)
	gen := s.loads.generation()
	r := client.Do(ctx, client.B().Evalsha().Sha1(scriptSHA).Numkeys(1).Key(key).Arg(args...).Build())
	if rerr, ok := rueidis.IsRedisErr(r.Error()); ok && (rerr.IsNoScript() || rerr.IsTryAgain()) {
		if rerr.IsNoScript() {
			// Start the reload now, even if ctx ends before it does, so
			// that the next decisions find the script.
			if err := s.reload(ctx, client, gen); err != nil {
				return algorithm.Decision{}, err
			}
		}
		// The slow path knows how to recover.
		var out [1]algorithm.Decision
		err := s.Decide(ctx, now, []store.Request{req}, out[:])
		return out[0], err
	}
	if err := r.Error(); err != nil {
		return algorithm.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	var v [6]int64
	if err := decodeInts(r, v[:]); err != nil {
		return algorithm.Decision{}, err
	}
	if v[5] < 0 || v[5] >= int64(len(reasons)) {
		return algorithm.Decision{}, fmt.Errorf("redisstore: script returned reason code %d", v[5])
	}
	return decision(v[:], sp), nil
}

// decodeInts reads an array reply of len(dst) integers into dst.
func decodeInts(r rueidis.RedisResult, dst []int64) error {
	msgs, err := r.ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: reading decision: %w", err)
	}
	if len(msgs) != len(dst) {
		return fmt.Errorf("redisstore: script returned %d values, want %d", len(msgs), len(dst))
	}
	for i := range msgs {
		if dst[i], err = msgs[i].AsInt64(); err != nil {
			return fmt.Errorf("redisstore: reading decision: %w", err)
		}
	}
	return nil
}

// decision builds a Decision from the script's six values; f[5] is a
// valid reason code.
func decision(f []int64, sp *spec) algorithm.Decision {
	return algorithm.Decision{
		Allowed:    f[0] == 1,
		Limit:      sp.limit,
		Remaining:  f[1],
		ResetAfter: time.Duration(f[2] * usec),
		RetryAfter: time.Duration(f[3] * usec),
		Delay:      time.Duration(f[4] * usec),
		Reason:     reasons[f[5]],
	}
}

// Decide decides every request and counts the allowed ones only if every
// non-Shadow request is allowed, as store.Store says. Requests that name
// the same limit and key see each other's effect, in order.
//
// On a single server, or when all requests fall in one Cluster slot, this is
// one atomic script call. Across Cluster slots it takes two round trips: the
// first checks every slot's requests without counting; if all pass, the
// second decides and counts slot by slot. A request that another client
// exhausts between the two is then rejected while the other slots' requests
// stay counted: an overcount, never an overshoot.
func (s *Store) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	return s.decideAll(ctx, now, reqs, out, nil)
}

// Acquire implements store.Leaser: Decide, with the units of every allowed
// concurrency request held under lease id (in the key's state, next to
// its count).
func (s *Store) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	if !id.Valid() {
		return lease.ErrInvalid
	}
	return s.decideAll(ctx, now, reqs, out, &id)
}

// ReleaseLease implements store.Leaser: one script call per Redis node
// gives back what lease id holds in the concurrency keys of reqs.
func (s *Store) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	if !id.Valid() {
		return false, nil
	}
	rs, err := s.resolve(reqs)
	if err != nil {
		return false, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	t := s.now(now)
	var calls []call
	for _, sub := range s.concurrencyGroups(rs) {
		calls = append(calls, leased(s.decideCall("l", t, reqs, rs, sub), id))
	}
	if len(calls) == 0 {
		return false, nil
	}
	res, err := s.exec(ctx, calls)
	if err != nil {
		return false, err
	}
	held := false
	for _, r := range res {
		vals, err := r.AsIntSlice()
		if err != nil {
			return false, fmt.Errorf("redisstore: release lease: %w", err)
		}
		for _, v := range vals {
			held = held || v == 1
		}
	}
	return held, nil
}

// leased puts lease id into a call of op 'a' or 'l', after op and time.
func leased(c call, id lease.ID) call {
	c.args = slices.Insert(c.args, 2, itoa(id.Hi), itoa(id.Lo))
	return c
}

// decideAll is Decide, holding concurrency units under *lease if it is not
// nil.
func (s *Store) decideAll(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision, lease *lease.ID) error {
	if len(out) != len(reqs) {
		return store.ErrOutLength
	}
	if len(reqs) == 0 {
		return nil
	}
	commitOp := "d"
	if lease != nil {
		commitOp = "a"
	}
	rs, err := s.resolve(reqs)
	if err != nil {
		return err
	}
	mk := func(op, t string, idx []int) call {
		c := s.decideCall(op, t, reqs, rs, idx)
		if op == "a" {
			c = leased(c, *lease)
		}
		return c
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	t := s.now(now)
	groups := s.groups(rs)
	if len(groups) == 1 && lease == nil && len(reqs) > 1 && !s.cluster && floorMode == "" {
		return s.decideGroupBatched(ctx, now, reqs, rs, out)
	}
	if len(groups) == 1 {
		res, err := s.exec(ctx, []call{mk(commitOp, t, groups[0])})
		if err != nil {
			return err
		}
		return decisions(res[0], rs, groups[0], out)
	}
	for _, op := range []string{"p", commitOp} {
		calls := make([]call, len(groups))
		for g, idx := range groups {
			calls[g] = mk(op, t, idx)
		}
		res, err := s.exec(ctx, calls)
		if err != nil {
			return err
		}
		for g, idx := range groups {
			if err := decisions(res[g], rs, idx, out); err != nil {
				return err
			}
		}
		for i := range reqs {
			if !out[i].Allowed && !reqs[i].Shadow {
				return nil // the check failed: nothing is counted
			}
		}
	}
	return nil
}

// indexes returns 0, 1, ..., n-1.
func indexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// groups splits request indexes by Cluster slot, in order of first
// appearance; on a single server all are one group.
func (s *Store) groups(rs []request) [][]int {
	if !s.cluster {
		return [][]int{indexes(len(rs))}
	}
	var groups [][]int
	slots := make([]uint16, 0, 4)
	for i, r := range rs {
		sl := slot(r.key)
		g := 0
		for g < len(slots) && slots[g] != sl {
			g++
		}
		if g == len(slots) {
			slots = append(slots, sl)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Release gives back the units of allowed requests. Only concurrency limits
// hold units; requests for other algorithms are skipped without a round
// trip.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	rs, err := s.resolve(reqs)
	if err != nil {
		return err
	}
	var keep []int
	for i := range rs {
		if rs[i].sp.code == codeConcurrency {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	t := s.now(now)
	var calls []call
	for _, sub := range s.concurrencyGroups(rs) {
		calls = append(calls, s.decideCall("r", t, reqs, rs, sub))
	}
	_, err = s.exec(ctx, calls)
	return err
}

// Sync records every batch's events into the shared state with the
// algorithm's Record and returns the merged state in each batch's State.
// All batches go out in one pipeline: one round trip per Redis node,
// however many keys; keys of one Cluster slot share a script call (at most
// 256 keys and 4,096 events per call, so that no call holds Redis long).
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	return s.sync(ctx, now, nil, batches)
}

// SyncOnce is Sync that applies each script call of the batch list at most
// once: every call carries id and its place in the list, and the script
// keeps, per node instance and hash slot, a small record of the calls it
// applied (the highest Seq seen and which calls of it), kept for
// id.Remember after the last one. A call sent again is skipped but still
// returns the current states. The calls of a list depend only on the
// batches, so a list sent again splits into the same calls.
func (s *Store) SyncOnce(ctx context.Context, now int64, id store.SyncID, batches []store.SyncBatch) error {
	if id.Origin == "" {
		return errors.New("redisstore: SyncOnce needs an id with an Origin")
	}
	return s.sync(ctx, now, &id, batches)
}

// onceKey returns the key holding the record of the calls applied from
// origin, in the hash slot of key (every key this store writes has a hash
// tag, so the record shares the slot of the call's keys in a Cluster).
func (s *Store) onceKey(key, origin string) string {
	tag := ""
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			tag = key[i+1 : i+1+j]
		}
	}
	return s.prefix + ":{" + tag + "}:sync-once:" + origin
}

func (s *Store) sync(ctx context.Context, now int64, id *store.SyncID, batches []store.SyncBatch) error {
	if len(batches) == 0 {
		return nil
	}
	rs := make([]request, len(batches))
	for i := range batches {
		sp, err := s.specFor(batches[i].Algorithm)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		rs[i] = request{sp: sp, key: s.key(sp, batches[i].Key)}
	}
	// A caller's own deadline bounds a sync, not the store's Timeout: a
	// delayed node gives a push that missed its deadline more time when it
	// sends it again, and capping that at Timeout would fail it forever.
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = s.deadline(ctx)
	}
	defer cancel()
	calls, parts := s.syncCalls(s.now(now), id, rs, batches)
	var res []rueidis.RedisResult
	var err error
	if floorMode != "" {
		res, err = s.floorSync(ctx, calls)
	} else {
		res, err = s.exec(ctx, calls)
	}
	if err != nil {
		return err
	}
	var words []int64
	for p, part := range parts {
		v, err := res[p].ToArray()
		if err != nil {
			return fmt.Errorf("redisstore: reading synced state: %w", err)
		}
		if len(v) != len(part) {
			return fmt.Errorf("redisstore: script returned %d states for %d keys", len(v), len(part))
		}
		for k, i := range part {
			sp := rs[i].sp
			packed, err := v[k].ToString()
			if err != nil {
				return fmt.Errorf("redisstore: reading synced state: %w", err)
			}
			if sp.code == codeBoundedLog && oneTime(packed) {
				words = oneTimeState(packed, sp.luaWords, words)
			} else if words, err = unpackState(packed, sp.luaWords, words); err != nil {
				return fmt.Errorf("redisstore: batch %d: %w", i, err)
			}
			b := &batches[i]
			if len(b.State) != sp.goWords {
				b.State = make([]int64, sp.goWords)
			}
			sp.toGo(words, b.State)
		}
	}
	return nil
}

// syncCalls splits a sync into script calls: per group of keys (a Cluster
// slot), at most maxBatchKeys keys and maxBatchEvents events per call. It
// returns the calls and, per call, the batch of each key it holds. With an
// id, each call is op 'S' with the id and its place in its group.
//
// A call sends a limit's header once per run of keys of that limit (the
// header, then the run's length, then each key's events): a push to one
// limit's many light keys carries the header once instead of per key.
func (s *Store) syncCalls(t string, id *store.SyncID, rs []request, batches []store.SyncBatch) ([]call, [][]int) {
	var calls []call
	var parts [][]int
	for _, idx := range s.groups(rs) {
		var c call
		var part []int
		var run *spec
		runAt, runLen := 0, 0 // index in c.args of the current run's length, and the length
		events, chunk := 0, 0
		flush := func() {
			if len(part) > 0 {
				if id != nil {
					// The record's key goes last; the script takes it off.
					c.keys = append(c.keys, s.onceKey(c.keys[0], id.Origin))
				}
				calls, parts = append(calls, c), append(parts, part)
				chunk++
			}
			c, part, events, run = call{args: []string{"s", t}}, nil, 0, nil
			if id != nil {
				remember := max(id.Remember.Milliseconds(), 1)
				c.args = []string{"S", t, strconv.FormatUint(id.Seq, 10), strconv.Itoa(chunk), itoa(remember)}
			}
		}
		flush()
		for _, i := range idx {
			evs := batches[i].Events
			for first := true; first || len(evs) > 0; first = false {
				if len(part) == maxBatchKeys || events >= maxBatchEvents {
					flush()
				}
				// A key with more events than fit goes on in the next call
				// of the same pipeline; the last call's state is the result.
				n := min(len(evs), maxBatchEvents-events)
				sp := rs[i].sp
				if sp != run {
					c.args = append(c.args, sp.header...)
					c.args = append(c.args, "0")
					run, runAt, runLen = sp, len(c.args)-1, 0
				}
				runLen++
				c.args[runAt] = strconv.Itoa(runLen)
				c.keys = append(c.keys, rs[i].key)
				c.args = appendEvents(c.args, evs[:n])
				part = append(part, i)
				events += n
				evs = evs[n:]
			}
		}
		flush()
	}
	return calls, parts
}

// appendEvents appends a key's events as op 's' takes them: the number of
// events, then each event's time in µs and cost; when every cost is 1, the
// negated number of events, then the times alone.
func appendEvents(args []string, evs []store.Event) []string {
	ones := true
	for _, e := range evs {
		ones = ones && e.Cost == 1
	}
	if ones && len(evs) > 0 {
		args = append(args, strconv.Itoa(-len(evs)))
		for _, e := range evs {
			args = append(args, itoa(floorDiv(e.Time, usec)))
		}
		return args
	}
	args = append(args, strconv.Itoa(len(evs)))
	for _, e := range evs {
		args = append(args, itoa(floorDiv(e.Time, usec)), itoa(e.Cost))
	}
	return args
}

// oneTime reports whether a synced state is bounded-log's one-time form:
// the count (1 to 999) and then the time in 16 digits, 17 to 19 digits in
// all (never a multiple of 8 bytes, so never doubles).
func oneTime(packed string) bool {
	if len(packed) < 17 || len(packed) > 19 || packed[0] == '0' {
		return false
	}
	for i := 0; i < len(packed); i++ {
		if packed[i] < '0' || packed[i] > '9' {
			return false
		}
	}
	return true
}

// oneTimeState returns the n state words of a one-time form (see oneTime):
// one entry of count units, all at one time, as the script reads it.
func oneTimeState(packed string, n int, buf []int64) []int64 {
	buf = slices.Grow(buf[:0], n)[:n]
	clear(buf)
	c, _ := strconv.ParseInt(packed[:len(packed)-16], 10, 64)
	t, _ := strconv.ParseInt(packed[len(packed)-16:], 10, 64)
	buf[0], buf[1], buf[2] = 1<<52+c<<18+1, t, t
	return buf
}

// unpackState decodes a state as the script stores it, little-endian
// doubles with the trailing zero words left out, into n words, reusing buf.
func unpackState(packed string, n int, buf []int64) ([]int64, error) {
	if len(packed)%8 != 0 || len(packed) > 8*n {
		return buf, fmt.Errorf("script returned a state of %d bytes, want a multiple of 8 up to %d", len(packed), 8*n)
	}
	buf = slices.Grow(buf[:0], n)[:n]
	clear(buf)
	for j := 0; j < len(packed)/8; j++ {
		var bits uint64
		for b := 7; b >= 0; b-- {
			bits = bits<<8 | uint64(packed[8*j+b])
		}
		buf[j] = int64(math.Float64frombits(bits))
	}
	return buf, nil
}

// concurrencyGroups returns, per group of requests one call can take, the
// indexes of its concurrency requests; groups without any are left out.
func (s *Store) concurrencyGroups(rs []request) [][]int {
	var out [][]int
	for _, idx := range s.groups(rs) {
		var sub []int
		for _, i := range idx {
			if rs[i].sp.code == codeConcurrency {
				sub = append(sub, i)
			}
		}
		if len(sub) > 0 {
			out = append(out, sub)
		}
	}
	return out
}
