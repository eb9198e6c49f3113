// Package tlsfiles builds a client TLS configuration from PEM files, as the
// server's Redis settings and the envoy-ratelimit compatible mode name them.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Load builds a client TLS configuration (for redisstore.Options.TLS) from
// PEM files: caFile holds the certificate authorities that sign the server's
// certificate (empty: the system's roots), certFile and keyFile a client
// certificate for servers that ask for one (both or neither), and
// serverName the name the server's certificate must carry (empty: the host
// of the address dialed).
func Load(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", caFile)
		}
		c.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("TLS client certificate: give the cert and key files together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
