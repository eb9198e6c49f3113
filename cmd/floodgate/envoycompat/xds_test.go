package envoycompat

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// xdsServer is a go-control-plane ADS server on a loopback port with a
// snapshot cache, recording the requests it receives (ACKs and NACKs).
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	grpc  *grpc.Server

	mu   sync.Mutex
	reqs []*discoveryv3.DiscoveryRequest
}

// startXDS serves on addr ("127.0.0.1:0" for a fresh port), with opts
// (TLS credentials).
func startXDS(t *testing.T, addr string, opts ...grpc.ServerOption) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discoveryv3.DiscoveryRequest) error {
		x.mu.Lock()
		x.reqs = append(x.reqs, r)
		x.mu.Unlock()
		return nil
	}}
	x.grpc = grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(x.grpc, serverv3.NewServer(context.Background(), x.cache, cb))
	go x.grpc.Serve(ln)
	t.Cleanup(x.grpc.Stop)
	return x
}

// push sets the node's rate limit configs at version.
func (x *xdsServer) push(t *testing.T, node, version string, confs ...*rlconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// answered reports whether the client answered a response: an ACK of
// version (nack false) or a NACK (nack true) that names want.
func (x *xdsServer) answered(version string, nack bool, want string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, r := range x.reqs {
		if r.GetResponseNonce() == "" || r.GetVersionInfo() != version || (r.GetErrorDetail() != nil) != nack {
			continue
		}
		if !nack || strings.Contains(r.GetErrorDetail().GetMessage(), want) {
			return true
		}
	}
	return false
}

// limitConfig is a RateLimitConfig of domain "gw" limiting key "route" to
// perHour requests.
func limitConfig(name string, perHour uint32, unit rlconfv3.RateLimitUnit) *rlconfv3.RateLimitConfig {
	return &rlconfv3.RateLimitConfig{Name: name, Domain: "gw", Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "route", RateLimit: &rlconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: perHour, Name: name},
	}}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startXDSCompat runs the compatibility server with CONFIG_TYPE=GRPC_XDS_SOTW
// pointed at the xDS server at addr.
func startXDSCompat(t *testing.T, addr string, env map[string]string) rlsv3.RateLimitServiceClient {
	t.Helper()
	// Counters last a day: each run counts under its own prefix.
	prefix := fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())
	m := map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": addr, "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr(), "CACHE_KEY_PREFIX": prefix,
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
	srv := runServer(t, m, env)
	conn, err := grpc.NewClient(srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// ask sends hits hits of route=value in domain gw and returns the answer.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, value string, hits uint32) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "gw", HitsAddend: hits, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "route", Value: value}}}}})
}

// limitOf is the requests_per_unit the answer for one hit of route=value
// reports (under the limit or over it), 0 without a limit or on error.
func limitOf(t *testing.T, c rlsv3.RateLimitServiceClient, value string) uint32 {
	resp, err := ask(t, c, value, 1)
	if err != nil {
		return 0
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

func TestXDSPushedRules(t *testing.T) {
	x := startXDS(t, "127.0.0.1:0")
	x.push(t, "envoy-ratelimit", "1", limitConfig("gw-1", 2, rlconfv3.RateLimitUnit_DAY))
	c := startXDSCompat(t, x.addr, nil)
	waitFor(t, "ACK of version 1", func() bool { return x.answered("1", false, "") })

	// The pushed limit applies: 3 hits over a limit of 2 are over it.
	resp, err := ask(t, c, "a", 3)
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("under the pushed limit of 2, 3 hits: %v, %v", resp, err)
	}

	// A changed config replaces it.
	x.push(t, "envoy-ratelimit", "2", limitConfig("gw-2", 5, rlconfv3.RateLimitUnit_DAY))
	waitFor(t, "the new limit of 5", func() bool { return limitOf(t, c, "b") == 5 })
	// The ACK follows the swap: wait for it rather than expect it at once.
	waitFor(t, "ACK of version 2", func() bool { return x.answered("2", false, "") })
	if resp, err := ask(t, c, "fresh", 5); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("5 hits under the new limit of 5: %v, %v", resp, err)
	}

	// A config the loader refuses is NACKed with its error, and the
	// running one stays.
	x.push(t, "envoy-ratelimit", "3", limitConfig("gw-3", 1, rlconfv3.RateLimitUnit_UNKNOWN))
	waitFor(t, "NACK of version 3", func() bool { return x.answered("2", true, "gw-3: invalid rate limit unit 'UNKNOWN'") })
	if got := limitOf(t, c, "c"); got != 5 {
		t.Fatalf("after a refused push the limit is %d, want the running 5", got)
	}
}

func TestXDSReconnects(t *testing.T) {
	x := startXDS(t, "127.0.0.1:0")
	x.push(t, "envoy-ratelimit", "1", limitConfig("gw-1", 2, rlconfv3.RateLimitUnit_DAY))
	c := startXDSCompat(t, x.addr, nil)
	if got := limitOf(t, c, "a"); got != 2 {
		t.Fatalf("limit %d, want 2", got)
	}

	// The management server goes away: the rules in force stay.
	x.grpc.Stop()
	if got := limitOf(t, c, "a"); got != 2 {
		t.Fatalf("with the xDS server down the limit is %d, want 2", got)
	}

	// It comes back on the same address with new rules: the client
	// reconnects, subscribes again and applies them.
	y := startXDS(t, x.addr)
	y.push(t, "envoy-ratelimit", "7", limitConfig("gw-7", 9, rlconfv3.RateLimitUnit_DAY))
	waitFor(t, "the limit of 9 from the restarted server", func() bool { return limitOf(t, c, "a") == 9 })
	waitFor(t, "ACK of version 7", func() bool { return y.answered("7", false, "") })
}

func TestXDSForceStart(t *testing.T) {
	x := startXDS(t, "127.0.0.1:0")
	c := startXDSCompat(t, x.addr, map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"})
	// Serving before any rules arrive: requests fail as the reference's do.
	if _, err := ask(t, c, "a", 1); err == nil || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Fatalf("before the first push: %v, want the reference's error", err)
	}
	x.push(t, "envoy-ratelimit", "1", limitConfig("gw-1", 4, rlconfv3.RateLimitUnit_DAY))
	waitFor(t, "the pushed limit", func() bool { return limitOf(t, c, "a") == 4 })
}

func TestXDSSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // a part of the error, "" for none
	}{
		{"xds", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, ""},
		{"unknown type", map[string]string{"CONFIG_TYPE": "GRPC_XDS"}, "CONFIG_TYPE"},
		{"force start with files", map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, "FORCE_START_WITHOUT_INITIAL_CONFIG"},
		{"headers", map[string]string{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "novalue"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{"backoff", map[string]string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "soon"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
		{"factor", map[string]string{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "NaN"}, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR"},
		{"empty url", map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": " "}, "CONFIG_GRPC_XDS_SERVER_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := ParseSettings(mapLookup(env))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)) {
				t.Fatalf("err %v, want one starting with %q", err, tc.want)
			}
		})
	}
}

func TestXDSNodeAndHeaders(t *testing.T) {
	set, err := ParseSettings(mapLookup(map[string]string{"CONFIG_GRPC_XDS_NODE_ID": "n1",
		"CONFIG_GRPC_XDS_NODE_METADATA": "a=1,b=x=y,skipped", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "X-Token:abc, k2:v2"}))
	if err != nil {
		t.Fatal(err)
	}
	n := xdsNode(set.XDS)
	md := n.GetMetadata().GetFields()
	if n.GetId() != "n1" || len(md) != 2 || md["a"].GetStringValue() != "1" || md["b"].GetStringValue() != "x=y" {
		t.Fatalf("node %v", n)
	}
	if fmt.Sprint(set.XDS.Headers) != "map[k2:v2 x-token:abc]" {
		t.Fatalf("headers %v", set.XDS.Headers)
	}
}

// writeCert writes a certificate for name (and 127.0.0.1) signed by ca (self-signed when
// ca is nil) and its key as PEM files in dir; it returns the certificate
// and key, and the files' paths.
func writeCert(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	parent, signer := tmpl, key
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature
	} else {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key, certPath, keyPath
}

// TestXDSTLS connects to an xDS server that requires a client certificate,
// as Envoy Gateway's does, with the CONFIG_GRPC_XDS_* TLS files.
func TestXDSTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caPath, _ := writeCert(t, dir, "ca", nil, nil)
	_, _, srvCert, srvKey := writeCert(t, dir, "envoy-gateway", ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "envoy-ratelimit", ca, caKey)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	x := startXDS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	x.push(t, "envoy-ratelimit", "1", limitConfig("gw-1", 3, rlconfv3.RateLimitUnit_DAY))
	c := startXDSCompat(t, x.addr, map[string]string{"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": cliCert, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": cliKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": caPath, "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "envoy-gateway"})
	if got := limitOf(t, c, "a"); got != 3 {
		t.Fatalf("limit %d over TLS, want 3", got)
	}

	// A CA file that does not load stops the start with a line naming it.
	set, err := ParseSettings(mapLookup(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true",
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": filepath.Join(dir, "missing.crt"), "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr(),
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), set, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "CONFIG_GRPC_XDS_SERVER_USE_TLS") {
		t.Fatalf("start with a missing CA file: %v", err)
	}
}

// FuzzXDSFiles feeds arbitrary bytes as a pushed resource: it is either
// refused with an error or loaded (or refused) by the loader, never a panic.
func FuzzXDSFiles(f *testing.F) {
	for _, c := range []*rlconfv3.RateLimitConfig{limitConfig("a", 1, rlconfv3.RateLimitUnit_SECOND),
		limitConfig("b", 0, rlconfv3.RateLimitUnit_UNKNOWN), {Name: "c", Domain: "", Descriptors: []*rlconfv3.RateLimitDescriptor{{}}}} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := xdsFiles([]*anypb.Any{{TypeUrl: rateLimitConfigType, Value: b}})
		if err == nil {
			_, _ = LoadConfig(files, false, WildcardsTrailing)
		}
	})
}

// TestXDSQuotaModeAndMetadata pushes the fields the reference reads from
// xDS beside its rule files' (quota_mode and metadata, in its
// RateLimitDescriptor): two quota limits reject a request only when both
// are over, and the dynamic metadata carries the metadata of the limits
// that passed, the first one's where they name the same field.
func TestXDSQuotaModeAndMetadata(t *testing.T) {
	md := func(name string) *structpb.Struct {
		s, err := structpb.NewStruct(map[string]any{"service_with_quota": map[string]any{"name": name}, "n": 1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	x := startXDS(t, "127.0.0.1:0")
	x.push(t, "envoy-ratelimit", "1", &rlconfv3.RateLimitConfig{Name: "q", Domain: "gw", Descriptors: []*rlconfv3.RateLimitDescriptor{
		{Key: "service", Value: "s1", QuotaMode: true, Metadata: md("s1"), RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_DAY, RequestsPerUnit: 1}},
		{Key: "service", Value: "s2", QuotaMode: true, Metadata: md("s2"), RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_DAY, RequestsPerUnit: 2}},
	}})
	c := startXDSCompat(t, x.addr, map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"})
	waitFor(t, "ACK of version 1", func() bool { return x.answered("1", false, "") })
	req := &rlsv3.RateLimitRequest{Domain: "gw", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "service", Value: "s1"}}},
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "service", Value: "s2"}}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// s1 holds 1 and s2 2: the first request passes both (s1's metadata
	// first), the second passes s2 alone, the third neither.
	for i, want := range []struct {
		code    rlsv3.RateLimitResponse_Code
		service string
	}{{rlsv3.RateLimitResponse_OK, "s1"}, {rlsv3.RateLimitResponse_OK, "s2"}, {rlsv3.RateLimitResponse_OVER_LIMIT, ""}} {
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
		if resp.GetOverallCode() != want.code || got != want.service {
			t.Errorf("request %d: %v with metadata for %q, want %v with %q", i+1, resp.GetOverallCode(), got, want.code, want.service)
		}
	}
}
