package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client-certificate modes of TLS.ClientAuth.
const (
	// ClientAuthRequired refuses a client that presents no certificate
	// signed by TLS.ClientCA.
	ClientAuthRequired = "required"
	// ClientAuthOptional accepts a client without a certificate, and
	// verifies the certificate of a client that presents one.
	ClientAuthOptional = "optional"
)

// validate checks that cert and key come together, and that client_ca and
// client_auth make sense.
func (t TLS) validate() error {
	if (t.Cert == "") != (t.Key == "") {
		return errors.New("cert and key must be given together")
	}
	if t.ClientCA != "" && t.Cert == "" {
		return errors.New("client_ca needs cert and key: client certificates are asked for during the TLS handshake")
	}
	switch t.ClientAuth {
	case "":
	case ClientAuthRequired, ClientAuthOptional:
		if t.ClientCA == "" {
			return fmt.Errorf("client_auth %q needs client_ca, the authorities that sign client certificates", t.ClientAuth)
		}
	default:
		return fmt.Errorf("client_auth %q: want %s or %s", t.ClientAuth, ClientAuthRequired, ClientAuthOptional)
	}
	return nil
}

// serverConfig loads the certificate, its key and the client authorities
// into a TLS configuration for a listener; nil when TLS is off.
func (t TLS) serverConfig() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if t.ClientCA == "" {
		return c, nil
	}
	data, err := os.ReadFile(t.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("client_ca %s: no PEM certificate in it", t.ClientCA)
	}
	c.ClientCAs = pool
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if t.ClientAuth == ClientAuthOptional {
		c.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// loadListenerTLS loads the TLS configuration of every listener that has
// one, so that a bad file stops the server at start.
func loadListenerTLS(cfg Config) (map[string]*tls.Config, error) {
	out := map[string]*tls.Config{}
	for _, l := range []struct {
		name string
		t    TLS
	}{{ListenerHTTP, cfg.HTTP.TLS}, {ListenerGRPC, cfg.GRPC.TLS}, {ListenerAdmin, cfg.Admin.TLS}, {ListenerGateway, cfg.Gateway.TLS}} {
		c, err := l.t.serverConfig()
		if err != nil {
			return nil, fmt.Errorf("%s.tls: %w", l.name, err)
		}
		if c != nil {
			out[l.name] = c
		}
	}
	return out, nil
}

// clientAuthName describes a listener's client-certificate mode for the log.
func clientAuthName(c *tls.Config) string {
	switch {
	case c == nil || c.ClientCAs == nil:
		return "off"
	case c.ClientAuth == tls.VerifyClientCertIfGiven:
		return ClientAuthOptional
	default:
		return ClientAuthRequired
	}
}
