package server

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/urlpath"
	"go.yaml.in/yaml/v3"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tracing"
	"github.com/floodgate-dev/floodgate/rules"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultYAML returns the documented default configuration file.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Config is the server's configuration, as read from a YAML file. The
// meaning of every field is documented in default.yaml.
type Config struct {
	HTTP            Listener       `yaml:"http"`
	GRPC            Listener       `yaml:"grpc"`
	Rules           string         `yaml:"rules"`
	Shadow          bool           `yaml:"shadow"`
	Store           Store          `yaml:"store"`
	Arrangement     Arrangement    `yaml:"arrangement"`
	TrustedProxies  []string       `yaml:"trusted_proxies"`
	Gateway         Gateway        `yaml:"gateway"`
	Pprof           bool           `yaml:"pprof"`
	MaxBodyBytes    int64          `yaml:"max_body_bytes"`
	ShutdownTimeout time.Duration  `yaml:"shutdown_timeout"`
	Log             Log            `yaml:"log"`
	Connections     Connections    `yaml:"connections"`
	Admin           Admin          `yaml:"admin"`
	RLS             RLS            `yaml:"rls"`
	Tracing         tracing.Config `yaml:"tracing"`
	Gubernator      Gubernator     `yaml:"gubernator"`
}

// RLS configures the answers of the Rate Limit Service (gRPC and POST /json).
type RLS struct {
	// Headers adds the RateLimit header fields to every answer's
	// response_headers_to_add, for Envoy to pass to clients. Off by
	// default, as in envoyproxy/ratelimit: Envoy can build its own.
	Headers bool `yaml:"headers"`
	// MaxDescriptors and MaxEntries bound a request's descriptors and a
	// descriptor's entries (rls.WithMaxDescriptors), at most the rule
	// engine's bounds.
	MaxDescriptors int `yaml:"max_descriptors"`
	MaxEntries     int `yaml:"max_entries"`
}

// Listener is a network address to serve on, optionally with TLS.
type Listener struct {
	// Addr is host:port; "off" disables the listener.
	Addr string `yaml:"addr"`
	TLS  TLS    `yaml:"tls"`
	// LimitOverrides is what the listener does with the limit a request
	// sets for a descriptor: allow, ignore or reject (rules.OverridePolicy).
	LimitOverrides string `yaml:"limit_overrides"`
	// Reflection serves gRPC server reflection (grpc.reflection.v1 and
	// v1alpha) describing every service of the listener; gRPC listener only.
	Reflection bool `yaml:"reflection"`
}

// OverridePolicy returns the listener's LimitOverrides (checked by
// validate).
func (l Listener) OverridePolicy() rules.OverridePolicy {
	var p rules.OverridePolicy
	_ = p.UnmarshalText([]byte(l.LimitOverrides))
	return p
}

// Enabled reports whether the listener is switched on.
func (l Listener) Enabled() bool { return l.Addr != "off" && l.Addr != "" }

// TLS names PEM files holding a certificate chain and its private key.
// Both empty means plain text. ClientCA, when set, asks clients for a
// certificate signed by one of its authorities.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA is a PEM file of the authorities that sign client
	// certificates; empty means clients are not asked for one.
	ClientCA string `yaml:"client_ca"`
	// ClientAuth is ClientAuthRequired (the default with ClientCA) or
	// ClientAuthOptional.
	ClientAuth string `yaml:"client_auth"`
}

// Enabled reports whether TLS is configured.
func (t TLS) Enabled() bool { return t.Cert != "" || t.Key != "" }

// Store says where counters live.
type Store struct {
	// Type is memory, redis or redis-cluster.
	Type string `yaml:"type"`
	// Addrs are host:port entries, or one address in the syntax of
	// redisstore.ParseURL (redis://, rediss://, redis-cluster://,
	// redis-sentinel://).
	Addrs  []string `yaml:"addrs"`
	Prefix string   `yaml:"prefix"`
	// MaxKeys and MaxBytes bound the memory store (see memstore.Options);
	// 0 means the store's own default for MaxKeys and no bound in bytes.
	MaxKeys  int   `yaml:"max_keys"`
	MaxBytes int64 `yaml:"max_bytes"`
	// RedisConn holds authentication, database, TLS and Sentinel.
	RedisConn `yaml:",inline"`
}

// MemoryLimit returns the Go runtime memory limit (GOMEMLIMIT) that suits
// the memory store's bound in bytes: the bound, half as much again for
// garbage and allocator slack, and 256 MiB for the rest of the server; 0
// when the store has no bound in bytes.
func (s Store) MemoryLimit() int64 {
	if s.Type != StoreMemory || s.MaxBytes <= 0 {
		return 0
	}
	return s.MaxBytes + s.MaxBytes/2 + 256<<20
}

// Store types.
const (
	StoreMemory       = "memory"
	StoreRedis        = "redis"
	StoreRedisCluster = "redis-cluster"
)

// Arrangement says how nodes share counters through a Redis store.
type Arrangement struct {
	// Mode is centralized, split or delayed.
	Mode distributed.Arrangement `yaml:"mode"`
	// Nodes fixes the number of nodes sharing the limits; 0 counts the
	// live nodes through Redis heartbeats (Membership).
	Nodes      int           `yaml:"nodes"`
	Membership Membership    `yaml:"membership"`
	Region     Region        `yaml:"region"`
	Interval   time.Duration `yaml:"interval"`
	Deadline   time.Duration `yaml:"deadline"`
	// SyncDeadline bounds one delayed-sync exchange.
	SyncDeadline time.Duration `yaml:"sync_deadline"`
	// BreakerFailures consecutive failures open the circuit breaker for
	// BreakerCooldown.
	BreakerFailures int           `yaml:"breaker_failures"`
	BreakerCooldown time.Duration `yaml:"breaker_cooldown"`
	// MaxDeadline is the ceiling of the centralized adaptive deadline
	// (Deadline is its floor; a ceiling below it is raised to it).
	MaxDeadline time.Duration `yaml:"max_deadline"`
	// MaxKeys and MaxBytes bound the node's table of keys; MaxPendingBytes
	// bounds its queue of counts not yet pushed. Zero means the default.
	MaxKeys         int   `yaml:"max_keys"`
	MaxBytes        int64 `yaml:"max_bytes"`
	MaxPendingBytes int64 `yaml:"max_pending_bytes"`
}

// Membership configures the heartbeats through which nodes with nodes: 0
// count each other (distributed.Membership).
type Membership struct {
	// Group names the nodes that count each other: those sharing the
	// rules (letters, digits, '.', '_', '-').
	Group string `yaml:"group"`
	// Period is how often a node beats; Expiry how long after its last
	// beat it is still counted (at least two periods).
	Period time.Duration `yaml:"period"`
	Expiry time.Duration `yaml:"expiry"`
	// Assume is the count a node uses until its first beat is answered.
	Assume int `yaml:"assume"`
}

// Region makes the node one of a region's nodes, among regions that share
// the limits, each with a Redis of its own (distributed.Region and
// redisstore.Exchange). Name empty: one region.
type Region struct {
	Name string `yaml:"name"`
	// Exchange is how often counts are forwarded to the other regions;
	// LinkTimeout how long a link may go without counts either way before
	// the region counts as cut off.
	Exchange    time.Duration `yaml:"exchange"`
	LinkTimeout time.Duration `yaml:"link_timeout"`
	// Others are the other regions: their names and their Redis.
	Others []OtherRegion `yaml:"others"`
}

// OtherRegion is another region and its Redis, reached as store: is (its
// prefix is this store's; its password comes from its address or
// password_file, never from FLOODGATE_REDIS_PASSWORD, which is this
// region's).
type OtherRegion struct {
	Name  string `yaml:"name"`
	Store Store  `yaml:"store"`
}

// Gateway configures the rate-limiting reverse proxy.
type Gateway struct {
	Addr        string   `yaml:"addr"`
	TLS         TLS      `yaml:"tls"`
	Domain      string   `yaml:"domain"`
	Descriptors []string `yaml:"descriptors"`
	Routes      []Route  `yaml:"routes"`
}

// Route sends requests whose path starts with Prefix to Upstream.
type Route struct {
	Prefix    string         `yaml:"prefix"`
	Upstream  string         `yaml:"upstream"`
	Transport RouteTransport `yaml:"transport"`
	Path      RoutePath      `yaml:"path"`
}

// RoutePath is the route's path policy: how the spellings its upstream
// may read as one path are made one before the rules see the path and the
// upstream is sent it (gateway.PathPolicy; empty values take the safe
// defaults).
type RoutePath struct {
	EncodedSlash  string `yaml:"encoded_slash"`
	Semicolon     string `yaml:"semicolon"`
	Case          string `yaml:"case"`
	TrailingSlash string `yaml:"trailing_slash"`
	Compatibility string `yaml:"compatibility"`
}

// RouteTransport tunes a route's pool of upstream connections; zero values
// take the defaults gateway.Transport documents.
type RouteTransport struct {
	MaxIdleConns          int           `yaml:"max_idle_conns"`
	MaxConns              int           `yaml:"max_conns"`
	DialTimeout           time.Duration `yaml:"dial_timeout"`
	TLSHandshakeTimeout   time.Duration `yaml:"tls_handshake_timeout"`
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	IdleConnTimeout       time.Duration `yaml:"idle_conn_timeout"`
}

// Log configures the structured logger.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// DefaultConfig returns the configuration serve uses without --config: the
// values in default.yaml.
func DefaultConfig() Config {
	c, err := parseConfig("default.yaml", defaultYAML, Config{}, "")
	if err != nil {
		panic("server: embedded default.yaml: " + err.Error())
	}
	return c
}

// LoadConfig reads the configuration file at path. Keys the file leaves out
// keep their default values; unknown keys and bad values are errors of the
// form "FILE:LINE: what is wrong". Relative paths in the file are made
// relative to the file's directory.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(path, data)
}

// ParseConfig is LoadConfig for a file already read; name is used in error
// messages and to resolve relative paths.
func ParseConfig(name string, data []byte) (Config, error) {
	return parseConfig(name, data, DefaultConfig(), filepath.Dir(name))
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
var fieldRE = regexp.MustCompile(`field (\S+) not found in type \S+`)

func parseConfig(name string, data []byte, c Config, dir string) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return Config{}, yamlError(name, err)
	}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return Config{}, yamlError(name, err)
		}
	}
	pos := positions(&root)
	at := func(path string) string {
		for p := path; p != ""; {
			if l, ok := pos[p]; ok {
				return fmt.Sprintf("%s:%d", name, l)
			}
			i := strings.LastIndexByte(p, '.')
			if i < 0 {
				break
			}
			p = p[:i]
		}
		return name
	}
	if err := c.validate(at); err != nil {
		return Config{}, err
	}
	if dir != "" {
		for _, p := range []*string{&c.Rules, &c.HTTP.TLS.Cert, &c.HTTP.TLS.Key, &c.HTTP.TLS.ClientCA, &c.GRPC.TLS.Cert, &c.GRPC.TLS.Key, &c.GRPC.TLS.ClientCA,
			&c.Gateway.TLS.Cert, &c.Gateway.TLS.Key, &c.Gateway.TLS.ClientCA,
			&c.Store.PasswordFile, &c.Store.TLS.CAFile, &c.Store.TLS.Cert, &c.Store.TLS.Key, &c.Store.Sentinel.PasswordFile,
			&c.Admin.TLS.Cert, &c.Admin.TLS.Key, &c.Admin.TLS.ClientCA, &c.Admin.TokenFile} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		}
	}
	return c, nil
}

// yamlError rewrites yaml.v3's "line N: ..." messages as "FILE:N: ...".
func yamlError(name string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		// A message quotes the offending value, which may span lines; keep
		// one line per problem so each names the file.
		m = strings.ReplaceAll(m, "\n", `\n`)
		m = fieldRE.ReplaceAllString(m, "unknown field $1 (see server/default.yaml for the known ones)")
		m = strings.Replace(m, "into time.Duration", "into a duration: write it like 200ms or 1m30s", 1)
		if g := lineRE.FindStringSubmatch(m); g != nil {
			fmt.Fprintf(&b, "%s:%s: %s", name, g[1], g[2])
		} else {
			fmt.Fprintf(&b, "%s: %s", name, strings.TrimPrefix(m, "yaml: "))
		}
	}
	return errors.New(b.String())
}

// positions maps dotted key paths ("store.type", "gateway.routes.0.prefix")
// to the line their value is on.
func positions(root *yaml.Node) map[string]int {
	pos := map[string]int{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				pos[p] = n.Content[i+1].Line
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := path + "." + strconv.Itoa(i)
				pos[p] = c.Line
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return pos
}

// validate checks c section by section, in file order; at gives a YAML
// path's position for the error message.
func (c *Config) validate(at func(string) string) error {
	for _, check := range []func(at func(string) string) error{
		c.validateListeners, c.validateStore, c.validateArrangement, c.validateGateway,
	} {
		if err := check(at); err != nil {
			return err
		}
	}
	if c.MaxBodyBytes < 1 {
		return fmt.Errorf("%s: max_body_bytes must be at least 1, got %d", at("max_body_bytes"), c.MaxBodyBytes)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("%s: shutdown_timeout must not be negative", at("shutdown_timeout"))
	}
	if err := c.Connections.validate(at); err != nil {
		return err
	}
	if err := c.Admin.validate(at); err != nil {
		return err
	}
	if m := rules.Max(); c.RLS.MaxDescriptors < 1 || c.RLS.MaxDescriptors > m.Descriptors || c.RLS.MaxEntries < 1 || c.RLS.MaxEntries > m.Entries {
		return fmt.Errorf("%s: rls.max_descriptors must be from 1 to %d and rls.max_entries from 1 to %d (the rule engine's bounds), got %d and %d",
			at("rls"), m.Descriptors, m.Entries, c.RLS.MaxDescriptors, c.RLS.MaxEntries)
	}
	if err := c.Gubernator.validate(at); err != nil {
		return err
	}
	if err := c.Tracing.Validate(); err != nil {
		return fmt.Errorf("%s: tracing: %v", at("tracing.protocol"), err)
	}
	if _, err := parseLevel(c.Log.Level); err != nil {
		return fmt.Errorf("%s: log.level: %v", at("log.level"), err)
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return fmt.Errorf("%s: log.format %q: want text or json", at("log.format"), c.Log.Format)
	}
	return nil
}

// validateListeners checks the http and grpc listeners.
func (c *Config) validateListeners(at func(string) string) error {
	for _, l := range []struct {
		name string
		l    Listener
	}{{"http", c.HTTP}, {"grpc", c.GRPC}} {
		if l.l.Enabled() {
			if err := checkAddr(l.l.Addr); err != nil {
				return fmt.Errorf("%s: %s.addr: %v", at(l.name+".addr"), l.name, err)
			}
		}
		if err := l.l.TLS.validate(); err != nil {
			return fmt.Errorf("%s: %s.tls: %v", at(l.name+".tls"), l.name, err)
		}
		var p rules.OverridePolicy
		if err := p.UnmarshalText([]byte(l.l.LimitOverrides)); err != nil {
			return fmt.Errorf("%s: %s.limit_overrides: %v", at(l.name+".limit_overrides"), l.name, err)
		}
	}
	if c.HTTP.Reflection {
		return fmt.Errorf("%s: http.reflection: reflection is a gRPC service, served on the grpc listener: set grpc.reflection", at("http.reflection"))
	}
	return nil
}

// validateStore checks the store section.
func (c *Config) validateStore(at func(string) string) error {
	if c.Store.MaxKeys < 0 || c.Store.MaxBytes < 0 {
		return fmt.Errorf("%s: store.max_keys and store.max_bytes must not be negative", at("store"))
	}
	switch c.Store.Type {
	case StoreMemory:
	case StoreRedis, StoreRedisCluster:
		if len(c.Store.Addrs) == 0 {
			return fmt.Errorf("%s: store.addrs: store %s needs at least one host:port", at("store"), c.Store.Type)
		}
		if _, err := c.Store.parse(); err != nil {
			return fmt.Errorf("%s: store: %v", at("store.addrs"), err)
		}
	default:
		return fmt.Errorf("%s: store.type %q: want memory, redis or redis-cluster", at("store.type"), c.Store.Type)
	}
	return nil
}

// validateArrangement checks the arrangement section.
func (c *Config) validateArrangement(at func(string) string) error {
	if !c.Arrangement.Mode.Valid() {
		return fmt.Errorf("%s: arrangement.mode %q: want centralized, split or delayed", at("arrangement.mode"), c.Arrangement.Mode)
	}
	if c.Arrangement.Nodes < 0 {
		return fmt.Errorf("%s: arrangement.nodes must be 0 (count the live nodes) or more, got %d", at("arrangement.nodes"), c.Arrangement.Nodes)
	}
	if err := c.Arrangement.Membership.validate(at); err != nil {
		return err
	}
	if err := c.validateRegion(at); err != nil {
		return err
	}
	if c.Arrangement.Interval <= 0 {
		return fmt.Errorf("%s: arrangement.interval must be positive, got %v", at("arrangement.interval"), c.Arrangement.Interval)
	}
	if c.Arrangement.Deadline <= 0 {
		return fmt.Errorf("%s: arrangement.deadline must be positive, got %v", at("arrangement.deadline"), c.Arrangement.Deadline)
	}
	if c.Arrangement.MaxDeadline < 0 || c.Arrangement.MaxKeys < 0 || c.Arrangement.MaxBytes < 0 || c.Arrangement.MaxPendingBytes < 0 {
		return fmt.Errorf("%s: arrangement.max_deadline, max_keys, max_bytes and max_pending_bytes must not be negative", at("arrangement"))
	}
	if c.Arrangement.SyncDeadline <= 0 {
		return fmt.Errorf("%s: arrangement.sync_deadline must be positive, got %v", at("arrangement.sync_deadline"), c.Arrangement.SyncDeadline)
	}
	if c.Arrangement.BreakerFailures < 1 {
		return fmt.Errorf("%s: arrangement.breaker_failures must be at least 1, got %d", at("arrangement.breaker_failures"), c.Arrangement.BreakerFailures)
	}
	if c.Arrangement.BreakerCooldown <= 0 {
		return fmt.Errorf("%s: arrangement.breaker_cooldown must be positive, got %v", at("arrangement.breaker_cooldown"), c.Arrangement.BreakerCooldown)
	}
	return nil
}

// validateRegion checks the region section.
func (c *Config) validateRegion(at func(string) string) error {
	r := c.Arrangement.Region
	if r.Name == "" {
		if len(r.Others) > 0 {
			return fmt.Errorf("%s: arrangement.region.others needs arrangement.region.name, this region's name", at("arrangement.region"))
		}
		return nil
	}
	where := at("arrangement.region") + ": arrangement.region"
	switch {
	case c.Store.Type == StoreMemory:
		return fmt.Errorf("%s: regions share counts through Redis: set store.type", where)
	case c.Arrangement.Mode == distributed.Centralized:
		return fmt.Errorf("%s: a region's nodes take mode delayed (or split): a centralized decision is not forwarded to the other regions", where)
	case c.Arrangement.Nodes != 0:
		return fmt.Errorf("%s: a region's nodes count each other (nodes: 0): the heartbeats bring the links' times", where)
	case len(r.Others) == 0:
		return fmt.Errorf("%s.others lists no other region", where)
	case r.Exchange <= 0 || r.LinkTimeout < 2*r.Exchange:
		return fmt.Errorf("%s.exchange must be positive and link_timeout at least two exchanges, got %v and %v", where, r.Exchange, r.LinkTimeout)
	}
	names := []string{r.Name}
	for _, o := range r.Others {
		if slices.Contains(names, o.Name) {
			return fmt.Errorf("%s: region %q is named twice", where, o.Name)
		}
		names = append(names, o.Name)
		if o.Store.Type != StoreRedis && o.Store.Type != StoreRedisCluster || len(o.Store.Addrs) == 0 {
			return fmt.Errorf("%s: region %q: its store needs type redis or redis-cluster and addrs", where, o.Name)
		}
		if o.Store.Prefix != "" && o.Store.Prefix != c.Store.Prefix {
			return fmt.Errorf("%s: region %q: its keys are named as this store's (prefix %q), not %q", where, o.Name, c.Store.Prefix, o.Store.Prefix)
		}
		if _, err := o.Store.parse(); err != nil {
			return fmt.Errorf("%s: region %q: %v", where, o.Name, err)
		}
	}
	for _, n := range names {
		if n == "" || len(n) > 64 || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
			return fmt.Errorf("%s: region %q: 1 to 64 letters, digits, '.', '_' or '-'", where, n)
		}
	}
	return nil
}

// validate checks the membership section.
func (m Membership) validate(at func(string) string) error {
	if m.Period <= 0 {
		return fmt.Errorf("%s: arrangement.membership.period must be positive, got %v", at("arrangement.membership.period"), m.Period)
	}
	if m.Expiry < 2*m.Period {
		return fmt.Errorf("%s: arrangement.membership.expiry %v must be at least two periods (%v)", at("arrangement.membership.expiry"), m.Expiry, 2*m.Period)
	}
	if m.Assume < 1 {
		return fmt.Errorf("%s: arrangement.membership.assume must be at least 1, got %d", at("arrangement.membership.assume"), m.Assume)
	}
	if m.Group == "" || len(m.Group) > 64 || strings.Trim(m.Group, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("%s: arrangement.membership.group %q: 1 to 64 letters, digits, '.', '_' or '-'", at("arrangement.membership.group"), m.Group)
	}
	return nil
}

// validateGateway checks the gateway section.
func (c *Config) validateGateway(at func(string) string) error {
	if len(c.Gateway.Routes) > 0 {
		if err := checkAddr(c.Gateway.Addr); err != nil {
			return fmt.Errorf("%s: gateway.addr: %v", at("gateway.addr"), err)
		}
	}
	if err := c.Gateway.TLS.validate(); err != nil {
		return fmt.Errorf("%s: gateway.tls: %v", at("gateway.tls"), err)
	}
	for i, d := range c.Gateway.Descriptors {
		if !validSource(d) {
			return fmt.Errorf("%s: gateway.descriptors: %q: want ip, path, method, host or header:<name>", at("gateway.descriptors."+strconv.Itoa(i)), d)
		}
	}
	for i, r := range c.Gateway.Routes {
		p := "gateway.routes." + strconv.Itoa(i)
		if !strings.HasPrefix(r.Prefix, "/") {
			return fmt.Errorf("%s: gateway route prefix %q must start with /", at(p+".prefix"), r.Prefix)
		}
		u, err := url.Parse(r.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: gateway route upstream %q: want an absolute http:// or https:// URL", at(p+".upstream"), r.Upstream)
		}
		if t := r.Transport; t.MaxIdleConns < 0 || t.MaxConns < 0 || t.DialTimeout < 0 || t.TLSHandshakeTimeout < 0 ||
			t.ResponseHeaderTimeout < 0 || t.IdleConnTimeout < 0 {
			return fmt.Errorf("%s: gateway route transport: values must not be negative (0 takes the default)", at(p+".transport"))
		}
		if _, err := urlpath.ParsePolicy(r.Path.EncodedSlash, r.Path.Semicolon, r.Path.Case, r.Path.TrailingSlash, r.Path.Compatibility); err != nil {
			return fmt.Errorf("%s: gateway route path: %v", at(p+".path"), err)
		}
	}
	return nil
}

func checkAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q: want host:port, such as 127.0.0.1:8080", a)
	}

	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port must be a number from 0 to 65535", a)
	}
	return nil
}

func validSource(s string) bool {
	switch s {
	case "ip", "path", "method", "host":
		return true
	}
	name, ok := strings.CutPrefix(s, "header:")
	return ok && name != ""
}
