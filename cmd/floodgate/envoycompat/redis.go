package envoycompat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/redis/rueidis"
)

// dialRedis connects to the Redis r describes, as envoyproxy/ratelimit
// does: REDIS_TYPE single (one address, a TCP host:port or a Unix socket
// path), cluster (comma-separated seed addresses) or sentinel (the master's
// name, then the sentinels); REDIS_AUTH as password or user:password;
// REDIS_TLS with its certificate files. It checks the connection with PING.
func dialRedis(ctx context.Context, r RedisSettings) (rueidis.Client, error) {
	o := rueidis.ClientOption{
		DisableCache:  true,
		AlwaysRESP2:   true, // twemproxy and older servers speak RESP2 only, as the reference does
		ClientSetInfo: rueidis.DisableClientSetInfo,
		// As the reference's radix pool, the connections are REDIS_POOL_SIZE.
		BlockingPoolSize:  r.PoolSize,
		PipelineMultiplex: -1,
	}
	o.Username, o.Password = splitAuth(r.Auth)
	if r.TLS {
		cfg, err := redisTLS(r)
		if err != nil {
			return nil, err
		}
		o.TLSConfig = cfg
	}
	if r.Timeout > 0 {
		o.Dialer.Timeout = r.Timeout
		o.ConnWriteTimeout = r.Timeout
	}
	addrs := splitList(r.URL)
	switch r.Type {
	case "single":
		o.InitAddress = []string{strings.TrimSpace(r.URL)}
		o.ForceSingleClient = true
	case "cluster":
		o.InitAddress = addrs
	case "sentinel":
		o.InitAddress = addrs[1:]
		o.Sentinel.MasterSet = addrs[0]
		o.Sentinel.Username, o.Sentinel.Password = splitAuth(r.SentinelAuth)
		o.Sentinel.TLSConfig = o.TLSConfig
	default:
		return nil, fmt.Errorf("REDIS_TYPE %q: want single, cluster or sentinel", r.Type)
	}
	if r.SocketType == "unix" {
		o.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
			c, err := d.DialContext(ctx, "unix", addr)
			if err != nil || cfg == nil {
				return c, err
			}
			tc := tls.Client(c, cfg)
			return tc, tc.HandshakeContext(ctx)
		}
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, fmt.Errorf("connecting to redis %s: %v", maskURL(r.URL), err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: PING: %v", maskURL(r.URL), err)
	}
	return c, nil
}

// splitAuth reads REDIS_AUTH: "password" or "user:password".
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// redisTLS builds the TLS configuration of REDIS_TLS_*: the CA file (else
// the system's roots), the client certificate, and whether host names
// are checked.
func redisTLS(r RedisSettings) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: r.TLSSkipHostnameVerification}
	if r.TLSCACert != "" {
		pem, err := os.ReadFile(r.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT %s: no PEM certificate in it", r.TLSCACert)
		}
		cfg.RootCAs = pool
	}
	if r.TLSSkipHostnameVerification {
		// Verify the chain, not the name, as the reference does.
		roots := cfg.RootCAs
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, roots)
		}
	}
	if (r.TLSClientCert == "") != (r.TLSClientKey == "") {
		return nil, errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together")
	}
	if r.TLSClientCert != "" {
		cert, err := tls.LoadX509KeyPair(r.TLSClientCert, r.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT/KEY: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// verifyChain checks a server's certificate chain against roots (nil: the
// system's), ignoring its names.
func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("redis TLS: the server sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

// maskURL hides credentials in a redis:// address list for logs.
func maskURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if at := strings.LastIndex(p, "@"); at >= 0 && strings.Contains(p, "://") {
			parts[i] = p[:strings.Index(p, "://")+3] + "*****@" + p[at+1:]
		}
	}
	return strings.Join(parts, ",")
}
