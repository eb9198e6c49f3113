package envoycompat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// GrpcTLSSettings are the GRPC_SERVER_TLS_* and GRPC_CLIENT_TLS_* variables:
// TLS on the RLS gRPC listener, and client certificates (mutual TLS) when a
// client CA is given.
type GrpcTLSSettings struct {
	// Use is GRPC_SERVER_USE_TLS.
	Use bool
	// Cert and Key are GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY, the
	// server's certificate chain and private key (PEM files).
	Cert, Key string
	// ClientCA is GRPC_CLIENT_TLS_CACERT: when set, every client must
	// present a certificate it signed.
	ClientCA string
	// ClientSAN is GRPC_CLIENT_TLS_SAN: when set with ClientCA, the client
	// certificate must name it.
	ClientSAN string
}

// grpcTLSSettings are the rows of the gRPC TLS variables. Envoy Gateway also
// sets GRPC_SERVER_TLS_CA_CERT, a name envoyproxy/ratelimit does not read:
// it is not read here either, so the listener asks for client certificates
// exactly when the reference does (GRPC_CLIENT_TLS_CACERT).
var grpcTLSSettings = []setting{
	{"GRPC_SERVER_USE_TLS", "false", boolean(func(s *Settings) *bool { return &s.GrpcTLS.Use })},
	{"GRPC_SERVER_TLS_CERT", "", str(func(s *Settings) *string { return &s.GrpcTLS.Cert })},
	{"GRPC_SERVER_TLS_KEY", "", str(func(s *Settings) *string { return &s.GrpcTLS.Key })},
	{"GRPC_CLIENT_TLS_CACERT", "", str(func(s *Settings) *string { return &s.GrpcTLS.ClientCA })},
	{"GRPC_CLIENT_TLS_SAN", "", str(func(s *Settings) *string { return &s.GrpcTLS.ClientSAN })},
}

// check refuses TLS without both of its files, as the reference stops when
// it has no certificate to serve.
func (g GrpcTLSSettings) check() error {
	if g.Use && (strings.TrimSpace(g.Cert) == "" || strings.TrimSpace(g.Key) == "") {
		return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY, the server's certificate and key files")
	}
	return nil
}

// certReloader serves the gRPC listener's certificate, read again from its
// files whenever their directories change (a Kubernetes Secret being
// updated swaps a symlink there), as the reference does. A pair that does
// not load is logged and the running certificate kept.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu   sync.RWMutex
	cert *tls.Certificate
}

func (r *certReloader) load() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("GRPC_SERVER_TLS_CERT/GRPC_SERVER_TLS_KEY: %v", err)
	}
	r.mu.Lock()
	r.cert = &c
	r.mu.Unlock()
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cert, nil
}

// watch reloads the pair on any change in the directories of its files
// until ctx ends; stop waits for the watcher to end.
func (r *certReloader) watch(ctx context.Context) (stop func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		r.log.Warn("the gRPC certificate will not be reloaded", "err", err)
		return func() {}
	}
	for _, d := range []string{filepath.Dir(r.certFile), filepath.Dir(r.keyFile)} {
		if err := w.Add(d); err != nil {
			r.log.Warn("the gRPC certificate will not be reloaded", "dir", d, "err", err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				if err := r.load(); err != nil {
					r.log.Error("keeping the running gRPC certificate", "err", err)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				r.log.Warn("watching the gRPC certificate", "err", err)
			}
		}
	}()
	return func() { w.Close(); <-done }
}

// grpcServerTLS builds the gRPC listener's TLS configuration as the
// reference reads its variables: the certificate and key; with
// GRPC_CLIENT_TLS_CACERT, client certificates required and verified against
// that CA; with GRPC_CLIENT_TLS_SAN too, the client certificate must name
// it. Difference: the CA file alone is trusted for client certificates (the
// reference adds the system's roots to it).
func grpcServerTLS(g GrpcTLSSettings, log *slog.Logger) (*tls.Config, *certReloader, error) {
	r := &certReloader{certFile: g.Cert, keyFile: g.Key, log: log}
	if err := r.load(); err != nil {
		return nil, nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.getCertificate, ClientAuth: tls.NoClientCert}
	if g.ClientCA == "" {
		return c, r, nil
	}
	pem, err := os.ReadFile(g.ClientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT %s: no PEM certificate in it", g.ClientCA)
	}
	c.ClientCAs = pool
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if san := g.ClientSAN; san != "" {
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if err := chain[0].VerifyHostname(san); err != nil {
					log.Warn("refusing a gRPC client", "err", err)
					return fmt.Errorf("client certificate does not name %q (GRPC_CLIENT_TLS_SAN)", san)
				}
			}
			return nil
		}
	}
	return c, r, nil
}
