package envoycompat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// envoyGatewayEnv is the environment Envoy Gateway's controller gives its
// rate-limit Deployment (internal/infrastructure/kubernetes/ratelimit in
// envoyproxy/gateway: rules over xDS with TLS, gRPC served with TLS,
// Prometheus with its statsd mapping mounted, Redis over TCP), with the
// Secret's files, the controller's address and the ports made local.
func envoyGatewayEnv(certs testPKI, xdsAddr, redisAddr, mappingFile string) map[string]string {
	return map[string]string{
		"RUNTIME_ROOT":                       certs.dir, // "/data": not read with xDS
		"RUNTIME_SUBDIRECTORY":               "ratelimit",
		"RUNTIME_IGNOREDOTFILES":             "true",
		"RUNTIME_WATCH_ROOT":                 "false",
		"LOG_LEVEL":                          "info",
		"USE_STATSD":                         "false",
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         xdsAddr, // envoy-gateway:18001
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS":                "true",
		"GRPC_SERVER_TLS_CERT":               certs.serverCert, // /certs/tls.crt
		"GRPC_SERVER_TLS_KEY":                certs.srvKey,     // /certs/tls.key
		"GRPC_SERVER_TLS_CA_CERT":            certs.caFile,     // /certs/ca.crt
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":     "true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":    certs.serverCert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":     certs.srvKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":  certs.caFile,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE":                  "tcp",
		"REDIS_URL":                          redisAddr,
		"USE_PROMETHEUS":                     "true",
		"PROMETHEUS_ADDR":                    "127.0.0.1:0", // :19001
		"PROMETHEUS_MAPPER_YAML":             mappingFile,   // /etc/statsd-exporter/conf.yaml
		// Local ports instead of the defaults 8080, 8081, 6070.
		"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
}

// egMapping is Envoy Gateway's statsd mapping (its statsd_conf.yaml): the
// reference's default mapping without the response time's scale.
func egMapping(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "conf.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(defaultMapping, "scale: 0.001, ", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEnvoyGatewayEnvironment starts compatibility mode with Envoy
// Gateway's environment: rules pushed over xDS by a server that requires
// the client certificate, answers over TLS, health on HOST/PORT, the
// per-limit stats on PROMETHEUS_ADDR under the mapping's names.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	certs := newTestPKI(t)
	pair, err := tls.LoadX509KeyPair(certs.clientCert, certs.cliKey) // the controller's certificate
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(certs.ca)
	x := startXDS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	srv := runServer(t, envoyGatewayEnv(certs, x.addr, redisSrv.Addr(), egMapping(t)), nil)

	// What Envoy Gateway's translator pushes for a BackendTrafficPolicy
	// with a global limit of 3 an hour per x-user-id on one route.
	x.push(t, "envoy-ratelimit", "1", &rlconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http",
		Descriptors: []*rlconfv3.RateLimitDescriptor{{Key: "httproute/default/backend/rule/0", Value: "httproute/default/backend/rule/0",
			Descriptors: []*rlconfv3.RateLimitDescriptor{{Key: "rule-0-match-0",
				RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 3}}}}}})
	waitFor(t, "ACK of the pushed rules", func() bool { return x.answered("1", false, "") })

	c := dialTLS(t, srv.Addr(ListenerGRPC), certs.ca, "", "")
	user := fmt.Sprintf("user-%d", time.Now().UnixNano()) // a key of its own per run
	req := &rlsv3.RateLimitRequest{Domain: "default/eg/http", Descriptors: []*commonv3.RateLimitDescriptor{
		desc("httproute/default/backend/rule/0", "httproute/default/backend/rule/0", "rule-0-match-0", user)}}
	for i := 1; i <= 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, req)
		cancel()
		want := rlsv3.RateLimitResponse_OK
		if i == 4 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || resp.GetOverallCode() != want || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 3 {
			t.Fatalf("call %d over TLS: %v %v, want %v under the pushed limit of 3", i, resp, err, want)
		}
	}

	// The probes of the Deployment: GET /healthcheck on 8080.
	resp, err := http.Get("http://" + srv.Addr(ListenerHTTP) + "/healthcheck")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthcheck: %v %v", resp, err)
	}
	resp.Body.Close()

	// The metrics port Envoy Gateway annotates for scraping.
	resp, err = http.Get("http://" + srv.Addr(ListenerPrometheus) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="default/eg/http",key1="httproute/default/backend/rule/0_httproute/default/backend/rule/0",key2="rule-0-match-0"} 4`,
		`ratelimit_service_rate_limit_over_limit{domain="default/eg/http",key1="httproute/default/backend/rule/0_httproute/default/backend/rule/0",key2="rule-0-match-0"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 4`,
		`ratelimit_service_config_load_success 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}
