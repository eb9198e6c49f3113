package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: k, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for a server (127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// writePair writes c's certificate and key as PEM files in dir.
func writePair(t *testing.T, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	kb, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// TestClientCertificates runs every listener with tls.client_ca, in the
// required and the optional mode, and connects with no client certificate,
// one signed by the configured authority and one signed by another.
func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, rogue := newTestCA(t, "floodgate test CA"), newTestCA(t, "someone else")
	caFile := filepath.Join(dir, "clients-ca.pem")
	os.WriteFile(caFile, ca.pem, 0o600)
	certFile, keyFile := writePair(t, dir, "server", ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth))
	good := ca.issue(t, "envoy", x509.ExtKeyUsageClientAuth)
	bad := rogue.issue(t, "intruder", x509.ExtKeyUsageClientAuth)
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()

	clients := []struct {
		name  string
		certs []tls.Certificate
	}{{"no certificate", nil}, {"signed by client_ca", []tls.Certificate{good}}, {"signed by another authority", []tls.Certificate{bad}}}
	for _, mode := range []struct {
		auth   string
		accept map[string]bool // by client name
	}{
		{ClientAuthRequired, map[string]bool{"signed by client_ca": true}},
		{ClientAuthOptional, map[string]bool{"no certificate": true, "signed by client_ca": true}},
	} {
		t.Run(mode.auth, func(t *testing.T) {
			tlsCfg := TLS{Cert: certFile, Key: keyFile, ClientCA: caFile, ClientAuth: mode.auth}
			cfg := testConfig()
			cfg.HTTP.TLS, cfg.GRPC.TLS, cfg.Gateway.TLS, cfg.Admin.TLS = tlsCfg, tlsCfg, tlsCfg, tlsCfg
			cfg.Admin.Addr = "127.0.0.1:0"
			cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
			r := start(t, cfg)
			for _, c := range clients {
				want := mode.accept[c.name]
				t.Run(c.name, func(t *testing.T) {
					tc := &tls.Config{RootCAs: roots}
					if c.certs != nil {
						// Present the certificate whatever authorities the
						// server names (Go's client would otherwise send
						// none for one they do not list).
						tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c.certs[0], nil }
					}
					for _, l := range []struct{ listener, path string }{
						{ListenerHTTP, "/healthz"}, {ListenerAdmin, "/metrics"}, {ListenerGateway, "/x"},
					} {
						hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
						resp, err := hc.Get("https://" + r.srv.Addr(l.listener) + l.path)
						if err == nil {
							resp.Body.Close()
						}
						hc.CloseIdleConnections()
						if got := err == nil && resp.StatusCode == 200; got != want {
							t.Errorf("%s listener: served=%v, want %v (err %v)", l.listener, got, want, err)
						}
						if err != nil && want == false && !strings.Contains(err.Error(), "certificate") {
							t.Errorf("%s listener: refused, but not for the certificate: %v", l.listener, err)
						}
					}
					conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(credentials.NewTLS(tc)))
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsReq("default", "client", "mtls"))
					if got := err == nil; got != want {
						t.Errorf("grpc listener: served=%v, want %v (err %v)", got, want, err)
					}
				})
			}
		})
	}
}

func TestClientCertificateConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"client_ca without a certificate", "http:\n  tls:\n    client_ca: ca.pem\n", "client_ca needs cert and key"},
		{"client_auth without client_ca", "grpc:\n  tls:\n    cert: c\n    key: k\n    client_auth: optional\n", "needs client_ca"},
		{"unknown client_auth", "gateway:\n  tls:\n    cert: c\n    key: k\n    client_ca: ca.pem\n    client_auth: maybe\n", `client_auth "maybe": want required or optional`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig(filepath.Join(dir, "floodgate.yaml"), []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	t.Run("client_ca file without a certificate", func(t *testing.T) {
		cfg := testConfig()
		cfg.GRPC.TLS = TLS{Cert: cert, Key: key, ClientCA: notPEM}
		_, err := New(context.Background(), cfg, nil)
		if err == nil || !strings.Contains(err.Error(), "grpc.tls: client_ca") {
			t.Fatalf("got %v, want grpc.tls: client_ca ... no PEM certificate", err)
		}
	})
}
