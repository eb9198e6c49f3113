package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tlsfiles"
	"github.com/floodgate-dev/floodgate/redisstore"
)

// PasswordEnv is the environment variable the Redis password is read from
// when neither the store address nor store.password_file gives one.
const PasswordEnv = "FLOODGATE_REDIS_PASSWORD"

// RedisConn says how to reach and authenticate to Redis. Its keys sit
// directly under store: in the configuration file.
type RedisConn struct {
	// Username is the ACL user (empty: the default user).
	Username string `yaml:"username"`
	// PasswordFile holds the password (a trailing newline is ignored).
	// Without it, the password comes from the address's user information
	// or the FLOODGATE_REDIS_PASSWORD environment variable.
	PasswordFile string `yaml:"password_file"`
	// DB selects a database (not with Redis Cluster).
	DB       int           `yaml:"db"`
	TLS      RedisTLS      `yaml:"tls"`
	Sentinel RedisSentinel `yaml:"sentinel"`
	// SlotsPerLimit spreads each limit's keys over that many Redis Cluster
	// hash tags, so one busy limit is served by several primaries (only
	// with redis-cluster; 0 or 1 keeps a limit in one slot). Changing it
	// moves every key: counts start again from zero.
	SlotsPerLimit int `yaml:"slots_per_limit"`
}

// RedisTLS configures TLS to Redis. It is on when Enabled is set, when the
// address is rediss://, or when any file or the server name is given.
type RedisTLS struct {
	Enabled bool `yaml:"enabled"`
	// CAFile holds the authorities that sign the server's certificate
	// (empty: the system's roots).
	CAFile string `yaml:"ca_file"`
	// Cert and Key are a client certificate, for servers that ask for one.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ServerName is the name the server's certificate must carry (empty:
	// the host of the address).
	ServerName string `yaml:"server_name"`
}

// on reports whether any TLS setting is given.
func (t RedisTLS) on() bool {
	return t.Enabled || t.CAFile != "" || t.Cert != "" || t.Key != "" || t.ServerName != ""
}

// RedisSentinel names the master Redis Sentinel monitors. With Master set,
// store.addrs are the sentinels' addresses.
type RedisSentinel struct {
	Master string `yaml:"master"`
	// Username and PasswordFile authenticate to the sentinels, if they
	// need it.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
}

// SetURL points the store at one address in the syntax of
// redisstore.ParseURL ("memory" selects the in-memory store): what
// `serve --store` does. The store type follows the address's scheme.
func (s *Store) SetURL(raw string) error {
	if raw == StoreMemory {
		s.Type, s.Addrs = StoreMemory, nil
		return nil
	}
	o, err := redisstore.ParseURL(raw)
	if err != nil {
		return err
	}
	s.Type, s.Addrs = StoreRedis, []string{raw}
	if o.Cluster {
		s.Type = StoreRedisCluster
	}
	return nil
}

// Address returns the store's address without credentials, for logs:
// "memory", or the Redis address in redisstore.ParseURL's syntax. For a
// configuration that does not parse it returns the type.
func (s Store) Address() string {
	if s.Type == StoreMemory {
		return StoreMemory
	}
	o, err := s.parse()
	if err != nil {
		return s.Type
	}
	return o.Address()
}

// parse reads store.addrs and the keys that shape the address (type,
// db, sentinel.master, username, TLS on or off), without reading any file.
func (s Store) parse() (redisstore.Options, error) {
	var o redisstore.Options
	if len(s.Addrs) == 0 {
		return o, fmt.Errorf("store %s needs at least one address: host:port or redis://host:port", s.Type)
	}
	if len(s.Addrs) == 1 {
		var err error
		if o, err = redisstore.ParseURL(s.Addrs[0]); err != nil {
			return o, err
		}
	} else {
		for _, a := range s.Addrs {
			if strings.Contains(a, "://") {
				return o, fmt.Errorf("%s among several addresses: give either one URL (redis-cluster://a:1,b:2) or host:port entries", redactAddr(a))
			}
			p, err := redisstore.ParseURL(a)
			if err != nil {
				return o, err
			}
			o.Addrs = append(o.Addrs, p.Addrs...)
		}
	}
	return o, s.merge(&o)
}

// merge applies the store's own keys to the options an address gave.
func (s Store) merge(o *redisstore.Options) error {
	switch {
	case s.Type == StoreRedisCluster:
		o.Cluster = true
	case o.Cluster:
		return errors.New("the address is a Redis Cluster URL: set store.type to redis-cluster")
	}
	if m := s.Sentinel.Master; m != "" {
		if o.SentinelMaster != "" && o.SentinelMaster != m {
			return fmt.Errorf("sentinel.master %q and the address's master=%q differ", m, o.SentinelMaster)
		}
		o.SentinelMaster = m
	}
	if o.Cluster && o.SentinelMaster != "" {
		return errors.New("Redis Cluster and Sentinel exclude each other")
	}
	if o.Cluster && s.DB != 0 {
		return errors.New("db: Redis Cluster has only database 0")
	}
	switch {
	case s.SlotsPerLimit < 0 || s.SlotsPerLimit > 16384:
		return fmt.Errorf("slots_per_limit %d: want 1 to 16384", s.SlotsPerLimit)
	case s.SlotsPerLimit > 1 && !o.Cluster:
		return errors.New("slots_per_limit needs store.type redis-cluster")
	}
	o.SlotsPerLimit = s.SlotsPerLimit
	if o.SentinelMaster == "" && len(o.Addrs) > 1 && !o.Cluster {
		return errors.New("several addresses need store.type redis-cluster, or sentinel.master for sentinels")
	}
	if s.DB < 0 || s.DB > redisstore.MaxDB {
		return fmt.Errorf("db %d: want 0 to %d", s.DB, redisstore.MaxDB)
	}
	if s.DB != 0 {
		if o.DB != 0 && o.DB != s.DB {
			return fmt.Errorf("db %d and the address's /%d differ", s.DB, o.DB)
		}
		o.DB = s.DB
	}
	if s.Username != "" {
		if o.Username != "" && o.Username != s.Username {
			return errors.New("username and the address's user name differ")
		}
		o.Username = s.Username
	}
	if (s.TLS.Cert == "") != (s.TLS.Key == "") {
		return errors.New("tls.cert and tls.key must be given together")
	}
	if s.TLS.on() && o.TLS == nil {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12} // files are loaded by RedisOptions
	}
	return nil
}

// RedisOptions returns the options to connect with: the address, the
// password (from the address, else store.password_file, else the
// FLOODGATE_REDIS_PASSWORD environment variable as getenv reads it), and
// TLS with its files loaded. Errors never contain the password.
func (s Store) RedisOptions(getenv func(string) string) (redisstore.Options, error) {
	o, err := s.parse()
	if err != nil {
		return o, err
	}
	tlsOn := o.TLS != nil || s.TLS.on()
	if tlsOn {
		if o.TLS, err = tlsfiles.Load(s.TLS.CAFile, s.TLS.Cert, s.TLS.Key, s.TLS.ServerName); err != nil {
			return o, fmt.Errorf("store.tls: %w", err)
		}
	}
	switch {
	case o.Password != "":
	case s.PasswordFile != "":
		if o.Password, err = readSecret(s.PasswordFile); err != nil {
			return o, fmt.Errorf("store.password_file: %w", err)
		}
	default:
		o.Password = getenv(PasswordEnv)
	}
	o.SentinelUsername = s.Sentinel.Username
	if s.Sentinel.PasswordFile != "" {
		if o.SentinelPassword, err = readSecret(s.Sentinel.PasswordFile); err != nil {
			return o, fmt.Errorf("store.sentinel.password_file: %w", err)
		}
	}
	o.Prefix = s.Prefix
	return o, nil
}

// readSecret reads a password file, dropping one trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return p, nil
}

// redactAddr quotes an address with any user information hidden.
func redactAddr(a string) string {
	if at := strings.LastIndexByte(a, '@'); at >= 0 {
		start := 0
		if i := strings.Index(a, "://"); i >= 0 && i < at {
			start = i + 3
		}
		a = a[:start] + "REDACTED" + a[at:]
	}
	return strconv.Quote(a)
}
