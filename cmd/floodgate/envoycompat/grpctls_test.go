package envoycompat

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testPKI is a certificate authority and certificates it signed, as PEM
// files in one directory (the shape of a Kubernetes TLS Secret mount).
type testPKI struct {
	dir                 string
	ca                  *x509.Certificate
	caKey               *ecdsa.PrivateKey
	caFile              string
	serverCert, srvKey  string
	clientCert, cliKey  string
	clientName          string
	otherCert, otherKey string // signed by the CA, another name
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	p := testPKI{dir: t.TempDir(), clientName: "envoy-gateway"}
	p.ca, p.caKey, p.caFile, _ = writeCert(t, p.dir, "ca", nil, nil)
	_, _, p.serverCert, p.srvKey = writeCert(t, p.dir, "envoy-ratelimit", p.ca, p.caKey)
	_, _, p.clientCert, p.cliKey = writeCert(t, p.dir, p.clientName, p.ca, p.caKey)
	_, _, p.otherCert, p.otherKey = writeCert(t, p.dir, "someone-else", p.ca, p.caKey)
	return p
}

// dialTLS connects to addr trusting ca for the server "envoy-ratelimit",
// presenting the certificate in certFile/keyFile when given.
func dialTLS(t *testing.T, addr string, ca *x509.Certificate, certFile, keyFile string) rlsv3.RateLimitServiceClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c := &tls.Config{RootCAs: pool, ServerName: "envoy-ratelimit", MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// oneHit asks for one hit of sec=value in domain test.
func oneHit(c rlsv3.RateLimitServiceClient, value string) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("sec", value)}})
}

func TestGRPCServerTLS(t *testing.T) {
	p := newTestPKI(t)
	otherCA, otherCAKey, _, _ := writeCert(t, t.TempDir(), "other-ca", nil, nil)
	_, _, strangerCert, strangerKey := writeCert(t, t.TempDir(), p.clientName, otherCA, otherCAKey)
	base := map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.serverCert, "GRPC_SERVER_TLS_KEY": p.srvKey}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	type client struct {
		name, cert, key string
		ok              bool
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		clients []client
	}{
		{"server TLS", base, []client{
			{"no certificate", "", "", true},
			{"a certificate nobody asked for", strangerCert, strangerKey, true},
		}},
		// Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT, which the reference
		// does not read: no client certificate is asked for.
		{"Envoy Gateway's CA variable", with(map[string]string{"GRPC_SERVER_TLS_CA_CERT": p.caFile}), []client{
			{"no certificate", "", "", true},
		}},
		{"mutual TLS", with(map[string]string{"GRPC_CLIENT_TLS_CACERT": p.caFile}), []client{
			{"signed by the CA", p.clientCert, p.cliKey, true},
			{"no certificate", "", "", false},
			{"signed by another CA", strangerCert, strangerKey, false},
		}},
		{"mutual TLS with a SAN", with(map[string]string{"GRPC_CLIENT_TLS_CACERT": p.caFile, "GRPC_CLIENT_TLS_SAN": p.clientName}), []client{
			{"naming the SAN", p.clientCert, p.cliKey, true},
			{"another name", p.otherCert, p.otherKey, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := startServer(t, testRules, tc.env)
			for _, cl := range tc.clients {
				t.Run(cl.name, func(t *testing.T) {
					resp, err := oneHit(dialTLS(t, srv.Addr(ListenerGRPC), p.ca, cl.cert, cl.key), t.Name())
					if cl.ok && (err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK) {
						t.Fatalf("refused: %v %v", resp, err)
					}
					if !cl.ok && err == nil {
						t.Fatalf("answered %v, want the handshake refused", resp)
					}
				})
			}
			t.Run("plaintext", func(t *testing.T) {
				conn, err := grpc.NewClient(srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := oneHit(rlsv3.NewRateLimitServiceClient(conn), "plain"); err == nil {
					t.Fatal("a plaintext call was answered on the TLS listener")
				}
			})
		})
	}
}

// TestGRPCServerTLSReload replaces the certificate files, as a rotated
// Kubernetes Secret does: new connections get the new certificate.
func TestGRPCServerTLSReload(t *testing.T) {
	p := newTestPKI(t)
	srv, _ := startServer(t, testRules, map[string]string{"GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": p.serverCert, "GRPC_SERVER_TLS_KEY": p.srvKey})
	if _, err := oneHit(dialTLS(t, srv.Addr(ListenerGRPC), p.ca, "", ""), "before"); err != nil {
		t.Fatal(err)
	}
	newCA, newCAKey, _, _ := writeCert(t, t.TempDir(), "new-ca", nil, nil)
	staging := t.TempDir()
	_, _, cert, key := writeCert(t, staging, "envoy-ratelimit", newCA, newCAKey)
	for _, f := range [][2]string{{key, p.srvKey}, {cert, p.serverCert}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the new certificate", func() bool {
		_, err := oneHit(dialTLS(t, srv.Addr(ListenerGRPC), newCA, "", ""), "after")
		return err == nil
	})
}

func TestGRPCServerTLSSettings(t *testing.T) {
	p := newTestPKI(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // part of the error of ParseSettings, or of New after it
	}{
		{"no files", map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{"no key", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.serverCert}, "GRPC_SERVER_TLS_KEY"},
		{"missing file", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": filepath.Join(p.dir, "none.crt"),
			"GRPC_SERVER_TLS_KEY": p.srvKey}, "GRPC_SERVER_TLS_CERT/GRPC_SERVER_TLS_KEY"},
		{"client CA not PEM", map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": p.serverCert,
			"GRPC_SERVER_TLS_KEY": p.srvKey, "GRPC_CLIENT_TLS_CACERT": p.srvKey}, "GRPC_CLIENT_TLS_CACERT"},
		{"not a boolean", map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, "GRPC_SERVER_USE_TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr(), "RUNTIME_ROOT": t.TempDir(),
				"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}
			for k, v := range tc.env {
				env[k] = v
			}
			set, err := ParseSettings(mapLookup(env))
			if err == nil {
				var srv *Server
				srv, err = New(context.Background(), set, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err == nil {
					srv.closeListeners()
					srv.closeClients()
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one with %q", err, tc.want)
			}
		})
	}
}
