package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// StartWithPassword starts a redis-server that requires AUTH with password
// (--requirepass) from every client. Do and the harness's own checks
// authenticate.
func StartWithPassword(tb testing.TB, password string) *Server {
	tb.Helper()
	return startServer(tb, &Server{tb: tb, dir: tb.TempDir(), password: password,
		args: []string{"--requirepass", password}})
}

// TLSFiles are PEM files made for a test: a certificate authority, a
// server certificate for 127.0.0.1 and localhost that it signed, and a
// client certificate it signed.
type TLSFiles struct {
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// StartTLS starts a redis-server that also listens with TLS (--tls-port,
// see TLSAddr) using certificates generated for the test, and that demands
// a client certificate signed by the same authority when requireClientCert
// is set. The plain port stays open for the harness's own checks. It fails
// the test if redis-server was built without TLS.
func StartTLS(tb testing.TB, requireClientCert bool) (*Server, TLSFiles) {
	tb.Helper()
	dir := tb.TempDir()
	files := MakeCertificates(tb, dir)
	tlsPort, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: finding a free TLS port: %v", err)
	}
	auth := "optional"
	if requireClientCert {
		auth = "yes"
	}
	s := &Server{tb: tb, dir: dir, tlsPort: tlsPort, args: []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", files.ServerCert,
		"--tls-key-file", files.ServerKey,
		"--tls-ca-cert-file", files.CA,
		"--tls-auth-clients", auth,
	}}
	return startServer(tb, s), files
}

// TLSAddr returns the "127.0.0.1:port" address of the TLS listener, or ""
// for a server started without TLS.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// MakeCertificates writes a fresh certificate authority and a server and a
// client certificate it signed into dir, valid for an hour, with ECDSA
// P-256 keys. The server certificate names 127.0.0.1, ::1 and localhost.
func MakeCertificates(tb testing.TB, dir string) TLSFiles {
	tb.Helper()
	now := time.Now()
	caKey := newKey(tb)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatalf("redistest: making the CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem")}
	writePEM(tb, f.CA, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, key string) {
		k := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			tb.Fatalf("redistest: making the %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(tb, cert, "CERTIFICATE", der)
		writePEM(tb, key, "EC PRIVATE KEY", keyDER)
		return cert, key
	}
	f.ServerCert, f.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	f.ClientCert, f.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return f
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("redistest: generating a key: %v", err)
	}
	return k
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
}

// ClientTLS returns a client TLS configuration that trusts f's certificate
// authority, presents f's client certificate when withCert is set, and
// expects serverName (empty: the host dialed).
func (f TLSFiles) ClientTLS(tb testing.TB, withCert bool, serverName string) *tls.Config {
	tb.Helper()
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	if withCert {
		cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			tb.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}
