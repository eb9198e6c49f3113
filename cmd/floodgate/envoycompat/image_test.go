package envoycompat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/internal/testkit/fixedport"
)

// TestImageEnvoyGateway runs the container image as Envoy Gateway's
// rate-limit Deployment runs it: command /bin/ratelimit, Envoy Gateway's
// environment, its TLS Secret mounted at /certs, its statsd mapping at
// /etc/statsd-exporter/conf.yaml; rules pushed over xDS with TLS from the
// host, answers over TLS. scripts/container-test runs it after building the
// image: FLOODGATE_TEST_IMAGE names the image and FLOODGATE_TEST_PODMAN a
// command that runs podman with the flags this machine needs; without them
// there is no image to run.
func TestImageEnvoyGateway(t *testing.T) {
	image, podman := os.Getenv("FLOODGATE_TEST_IMAGE"), os.Getenv("FLOODGATE_TEST_PODMAN")
	if image == "" || podman == "" {
		t.Skip("runs the container image: scripts/container-test sets FLOODGATE_TEST_IMAGE and FLOODGATE_TEST_PODMAN")
	}
	p := newTestPKI(t)
	// The Secret's files under their names in the mount, readable by the
	// image's user (65532).
	certs, etc := t.TempDir(), t.TempDir()
	for _, f := range [][2]string{{p.serverCert, "tls.crt"}, {p.srvKey, "tls.key"}, {p.caFile, "ca.crt"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certs, f[1]), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(etc, "conf.yaml"), []byte(strings.Replace(defaultMapping, "scale: 0.001, ", "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{certs, etc} {
		os.Chmod(d, 0o755)
	}

	pair, err := tls.LoadX509KeyPair(p.clientCert, p.cliKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	x := startXDS(t, "127.0.0.1:0", grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	x.push(t, "envoy-ratelimit", "1", &rlconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http",
		Descriptors: []*rlconfv3.RateLimitDescriptor{{Key: "rule-0-match-0",
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 2}}}})

	ports := freePorts(t, 4) // http, grpc, debug, prometheus
	env := envoyGatewayEnv(testPKI{dir: "/data", serverCert: "/certs/tls.crt", srvKey: "/certs/tls.key", caFile: "/certs/ca.crt"},
		x.addr, redisSrv.Addr(), "/etc/statsd-exporter/conf.yaml")
	env["PORT"], env["GRPC_PORT"], env["DEBUG_PORT"] = ports[0], ports[1], ports[2]
	env["PROMETHEUS_ADDR"] = "127.0.0.1:" + ports[3]
	name := fmt.Sprintf("floodgate-eg-test-%d", os.Getpid())
	args := []string{"run", "-d", "--name", name, "--network", "host", "--read-only",
		"-v", certs + ":/certs:ro", "-v", etc + ":/etc/statsd-exporter:ro", "--entrypoint", "/bin/ratelimit"}
	for k, v := range env {
		args = append(args, "-e", k+"="+v)
	}
	if out, err := exec.Command(podman, append(args, image)...).CombinedOutput(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command(podman, "logs", name).CombinedOutput()
			t.Logf("container log:\n%s", out)
		}
		exec.Command(podman, "rm", "-f", name).Run()
	})

	waitFor(t, "the container's /healthcheck", func() bool {
		resp, err := http.Get("http://127.0.0.1:" + ports[0] + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	waitFor(t, "ACK of the pushed rules", func() bool { return x.answered("1", false, "") })
	c := dialTLS(t, "127.0.0.1:"+ports[1], p.ca, "", "")
	user := fmt.Sprintf("user-%d", time.Now().UnixNano())
	for i := 1; i <= 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "default/eg/http",
			Descriptors: []*commonv3.RateLimitDescriptor{desc("rule-0-match-0", user)}})
		cancel()
		want := rlsv3.RateLimitResponse_OK
		if i == 3 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("call %d to the image over TLS: %v %v, want %v", i, resp, err, want)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + ports[3] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
}

// freePorts returns n free loopback ports for the container's listeners.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, strconv.Itoa(fixedport.Free(t)))
	}
	return out
}
