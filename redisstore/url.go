package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// URL schemes ParseURL accepts. The "s" forms use TLS.
const (
	SchemeRedis    = "redis"
	SchemeCluster  = "redis-cluster"
	SchemeSentinel = "redis-sentinel"
)

// MaxDB is the highest database number ParseURL accepts (Redis's default
// configuration has 16 databases; servers may have more).
const MaxDB = 1 << 20

// ParseURL reads a Redis address in the one syntax Floodgate uses
// everywhere (configuration file, serve --store, sim distributed --store):
//
//	host:port                                   one server, plain text
//	redis://[user[:password]@]host:port[/db]    one server
//	rediss://...                                the same over TLS
//	redis-cluster://host:port[,host:port...]    Redis Cluster seed nodes
//	redis-sentinel://host:port[,host:port...][/db]?master=NAME
//	                                            the master NAME that these
//	                                            Redis Sentinels monitor
//
// rediss-cluster:// and rediss-sentinel:// are the TLS forms. The user name
// and password are percent-decoded, so a password holding '@', ':' or '/'
// is written with %40, %3A, %2F. The returned Options has Addrs, Cluster,
// SentinelMaster, Username, Password, DB and TLS (with the system's root
// certificates) set; the caller fills the rest. Errors never repeat the
// password.
func ParseURL(raw string) (Options, error) {
	var o Options
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return o, errors.New("empty Redis address: want host:port or redis://host:port")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = SchemeRedis, raw
		if strings.ContainsAny(raw, "@/?") {
			return o, fmt.Errorf("Redis address %s: want host:port, or a URL such as redis://host:port/0", redactRaw(raw))
		}
	}
	base, secure := splitScheme(strings.ToLower(scheme))
	switch base {
	case SchemeRedis:
	case SchemeCluster:
		o.Cluster = true
	case SchemeSentinel:
	default:
		return o, fmt.Errorf("Redis address %s: unknown scheme: want redis, rediss, redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel", redactRaw(raw))
	}
	if secure {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if err := o.setUser(rest[:at]); err != nil {
			return Options{}, fmt.Errorf("Redis address %s: %v", redactRaw(raw), err)
		}
		rest = rest[at+1:]
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if err := o.setHosts(hosts, base); err != nil {
		return Options{}, fmt.Errorf("Redis address %s: %v", redactRaw(raw), err)
	}
	if err := o.setDB(path, base); err != nil {
		return Options{}, fmt.Errorf("Redis address %s: %v", redactRaw(raw), err)
	}
	if err := o.setQuery(query, base); err != nil {
		return Options{}, fmt.Errorf("Redis address %s: %v", redactRaw(raw), err)
	}
	return o, nil
}

// splitScheme returns the scheme without its TLS "s" and whether it had it.
func splitScheme(s string) (base string, secure bool) {
	for _, b := range []string{SchemeRedis, SchemeCluster, SchemeSentinel} {
		if s == b {
			return b, false
		}
		if tlsForm(b) == s {
			return b, true
		}
	}
	return s, false
}

// tlsForm returns the TLS spelling of a scheme: rediss, rediss-cluster,
// rediss-sentinel.
func tlsForm(base string) string {
	return "rediss" + strings.TrimPrefix(base, "redis")
}

func (o *Options) setUser(info string) error {
	user, pass, hasPass := strings.Cut(info, ":")
	var err error
	if o.Username, err = url.PathUnescape(user); err != nil {
		return errors.New("the user name has a bad %-escape")
	}
	if hasPass {
		if o.Password, err = url.PathUnescape(pass); err != nil {
			return errors.New("the password has a bad %-escape (write '%' as %25)")
		}
	}
	if o.Password == "" && hasPass {
		return errors.New("empty password after ':'; leave out the ':' or give the password")
	}
	return nil
}

func (o *Options) setHosts(hosts, base string) error {
	if hosts == "" {
		return errors.New("no host:port")
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return fmt.Errorf("%q is not host:port", h)
		}
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: the port must be a number from 1 to 65535", h)
		}
		o.Addrs = append(o.Addrs, net.JoinHostPort(host, port))
	}
	if base == SchemeRedis && len(o.Addrs) > 1 {
		return fmt.Errorf("%d addresses for one server: use redis-cluster:// for Cluster seed nodes or redis-sentinel:// for sentinels", len(o.Addrs))
	}
	return nil
}

func (o *Options) setDB(path, base string) error {
	if path == "" {
		return nil
	}
	n, err := strconv.Atoi(path)
	if err != nil || n < 0 || n > MaxDB || strconv.Itoa(n) != path {
		return fmt.Errorf("database %q: want a number such as /0", path)
	}
	if base == SchemeCluster && n != 0 {
		return errors.New("Redis Cluster has only database 0")
	}
	o.DB = n
	return nil
}

func (o *Options) setQuery(query, base string) error {
	if query == "" {
		if base == SchemeSentinel {
			return errors.New("redis-sentinel:// needs ?master=NAME, the name the sentinels monitor the master by")
		}
		return nil
	}
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if k != "master" || base != SchemeSentinel {
			return fmt.Errorf("unknown parameter %q (only redis-sentinel:// takes one: master)", k)
		}
		name, err := url.QueryUnescape(v)
		if err != nil || name == "" || o.SentinelMaster != "" {
			return errors.New("master= needs one master name")
		}
		o.SentinelMaster = name
	}
	return nil
}

// Address returns the address o names in ParseURL's syntax, without the
// password: what logs, errors and the status page show.
func (o Options) Address() string {
	base := SchemeRedis
	switch {
	case o.Cluster:
		base = SchemeCluster
	case o.SentinelMaster != "":
		base = SchemeSentinel
	}
	var b strings.Builder
	if o.TLS != nil {
		b.WriteString(tlsForm(base))
	} else {
		b.WriteString(base)
	}
	b.WriteString("://")
	if o.Username != "" {
		b.WriteString(escapeUser(o.Username))
		b.WriteByte('@')
	}
	b.WriteString(strings.Join(o.Addrs, ","))
	if o.DB != 0 {
		b.WriteString("/" + strconv.Itoa(o.DB))
	}
	if o.SentinelMaster != "" {
		b.WriteString("?master=" + url.QueryEscape(o.SentinelMaster))
	}
	return b.String()
}

// redactRaw returns raw quoted, with any user information replaced, for
// error messages.
func redactRaw(raw string) string {
	if at := strings.LastIndexByte(raw, '@'); at >= 0 {
		start := 0
		if i := strings.Index(raw, "://"); i >= 0 && i < at {
			start = i + 3
		}
		raw = raw[:start] + "REDACTED" + raw[at:]
	}
	return strconv.Quote(raw)
}

// escapeUser percent-encodes every byte of a user name outside
// [A-Za-z0-9-._~], so that ParseURL reads it back unchanged.
func escapeUser(u string) string {
	var b strings.Builder
	for i := 0; i < len(u); i++ {
		c := u[i]
		if plain(c) || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
