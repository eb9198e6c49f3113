package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestGubernatorAPI: `floodgate serve` answers gubernator's API on its
// gRPC and HTTP listeners, both on one store.
func TestGubernatorAPI(t *testing.T) {
	r := start(t, testConfig())
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := gubernatorpb.NewV1Client(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := cl.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		{Name: "api", UniqueKey: "u1", Hits: 1, Limit: 2, Duration: 60_000}}})
	if err != nil || resp.Responses[0].Remaining != 1 {
		t.Fatalf("gRPC GetRateLimits: %v %v", resp, err)
	}
	h, err := cl.HealthCheck(ctx, &gubernatorpb.HealthCheckReq{})
	if err != nil || h.Status != "healthy" || h.AdvertiseAddress != r.srv.Addr(ListenerGRPC) {
		t.Fatalf("gRPC HealthCheck: %v %v", h, err)
	}
	hr, err := http.Post(r.url("/v1/GetRateLimits"), "application/json",
		strings.NewReader(`{"requests":[{"name":"api","unique_key":"u1","hits":1,"limit":2,"duration":60000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	b, _ := io.ReadAll(hr.Body)
	var got struct {
		Responses []struct{ Remaining string }
	}
	if err := json.Unmarshal(b, &got); hr.StatusCode != 200 || err != nil || len(got.Responses) != 1 || got.Responses[0].Remaining != "0" {
		t.Fatalf("HTTP GetRateLimits (the key's second hit): %d %s", hr.StatusCode, b)
	}
	var health struct{ Status string }
	if code, body := httpGet(t, r.url("/v1/HealthCheck")); code != 200 || json.Unmarshal([]byte(body), &health) != nil || health.Status != "healthy" {
		t.Fatalf("HTTP HealthCheck: %d %s", code, body)
	}
	// The JSON API's own paths are still served beside them.
	if code, _ := httpGet(t, r.url("/v1/check")); code == http.StatusNotFound {
		t.Fatal("/v1/check is gone")
	}
}

// guberCall sends one GetRateLimits call of reqs to the server's gRPC
// listener.
func guberCall(t *testing.T, r *running, reqs ...*gubernatorpb.RateLimitReq) ([]*gubernatorpb.RateLimitResp, error) {
	t.Helper()
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := gubernatorpb.NewV1Client(conn).GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: reqs})
	return resp.GetResponses(), err
}

// TestGubernatorAPIOnRedis: two servers on one Redis share a gubernator
// key, in the centralized and the delayed arrangement, on one server and
// on a Cluster.
func TestGubernatorAPIOnRedis(t *testing.T) {
	rd := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, c := range []struct {
		name  string
		store Store
		mode  distributed.Arrangement
	}{
		{"centralized", Store{Type: StoreRedis, Addrs: []string{rd.Addr()}, Prefix: "fgguber"}, distributed.Centralized},
		{"delayed", Store{Type: StoreRedis, Addrs: []string{rd.Addr()}, Prefix: "fgguberd"}, distributed.Delayed},
		{"cluster", Store{Type: StoreRedisCluster, Addrs: cl.Addrs(), Prefix: "fgguberc"}, distributed.Centralized},
	} {
		t.Run(c.name, func(t *testing.T) {
			var srv [2]*running
			for i := range srv {
				cfg := testConfig()
				cfg.Store = c.store
				cfg.Arrangement.Mode = c.mode
				cfg.Arrangement.Nodes = 2
				cfg.Arrangement.Interval = 50 * time.Millisecond
				srv[i] = start(t, cfg)
			}
			req := func(hits int64) *gubernatorpb.RateLimitReq {
				return &gubernatorpb.RateLimitReq{Name: "api", UniqueKey: "u1", Hits: hits, Limit: 10, Duration: 600_000}
			}
			for i, want := range []int64{9, 8} {
				resp, err := guberCall(t, srv[i], req(1))
				if err != nil || resp[0].Error != "" || resp[0].Remaining != want {
					t.Fatalf("server %d: %v %v, want remaining %d", i, resp, err, want)
				}
				if c.mode == distributed.Delayed {
					// The hits reach Redis at the next sync, and the other
					// server reads them at its own.
					waitRemaining(t, srv[1-i], want)
				}
			}
			resp, err := guberCall(t, srv[0], req(0))
			if err != nil || resp[0].Remaining != 8 {
				t.Fatalf("server 0 after both servers' hits: %v %v, want remaining 8", resp, err)
			}
			if n := peerCount(t, srv[0]); n != 2 {
				t.Errorf("HealthCheck's peer_count %d, want arrangement.nodes 2", n)
			}
		})
	}
}

// peerCount returns the server's HealthCheck peer_count.
func peerCount(t *testing.T, r *running) int32 {
	t.Helper()
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := gubernatorpb.NewV1Client(conn).HealthCheck(ctx, &gubernatorpb.HealthCheckReq{})
	if err != nil {
		t.Fatal(err)
	}
	return h.PeerCount
}

// TestGubernatorPeerCountLive: with arrangement.nodes 0, HealthCheck's
// peer_count is the live count of the nodes sharing the Redis store.
func TestGubernatorPeerCountLive(t *testing.T) {
	rd := redistest.Start(t)
	var srv [3]*running
	for i := range srv {
		cfg := testConfig()
		cfg.Store = Store{Type: StoreRedis, Addrs: []string{rd.Addr()}, Prefix: "fgpeers"}
		cfg.Arrangement.Nodes = 0
		cfg.Arrangement.Membership.Period = 100 * time.Millisecond
		cfg.Arrangement.Membership.Expiry = 500 * time.Millisecond
		srv[i] = start(t, cfg)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		n := peerCount(t, srv[0])
		if n == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer_count %d a minute after three nodes started, want 3", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitRemaining waits until the server answers a hits-0 request of the
// test's key with remaining want.
func waitRemaining(t *testing.T, r *running, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := guberCall(t, r, &gubernatorpb.RateLimitReq{Name: "api", UniqueKey: "u1", Limit: 10, Duration: 600_000})
		if err == nil && resp[0].Remaining == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other server never saw remaining %d: %v %v", want, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGubernatorConfig: every key of the gubernator section is honoured:
// enabled off serves neither the gRPC service nor the HTTP paths;
// on_failure decides while Redis is down (open answers, closed answers an
// error, local enforces the limit's share of arrangement.nodes); an
// unknown policy is refused.
func TestGubernatorConfig(t *testing.T) {
	cfg := testConfig()
	cfg.Gubernator.Enabled = false
	r := start(t, cfg)
	if _, err := guberCall(t, r, &gubernatorpb.RateLimitReq{Name: "a", UniqueKey: "b", Limit: 1}); status.Code(err) != codes.Unimplemented {
		t.Errorf("gRPC with gubernator.enabled false: %v, want UNIMPLEMENTED", err)
	}
	hr, err := http.Post(r.url("/v1/GetRateLimits"), "application/json", strings.NewReader(`{"requests":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusNotFound {
		t.Errorf("HTTP with gubernator.enabled false: %d, want 404", hr.StatusCode)
	}

	if _, err := ParseConfig("f.yaml", []byte("gubernator:\n  on_failure: later\n")); err == nil || !strings.Contains(err.Error(), "on_failure") {
		t.Errorf("on_failure later: %v, want an error naming it", err)
	}
	if _, err := ParseConfig("f.yaml", []byte("gubernator:\n  global: true\n")); err == nil {
		t.Error("an unknown key of the gubernator section was accepted")
	}

	rd := redistest.Start(t)
	for _, c := range []struct {
		policy string
		check  func(resp *gubernatorpb.RateLimitResp) bool
		want   string
	}{
		{"open", func(r *gubernatorpb.RateLimitResp) bool { return r.Error == "" && r.Limit == 10 && r.Remaining == 9 }, "answered from the node's view"},
		{"closed", func(r *gubernatorpb.RateLimitResp) bool { return strings.Contains(r.Error, "store") && r.Limit == 0 }, "an error naming the store"},
		{"local", func(r *gubernatorpb.RateLimitResp) bool { return r.Error == "" && r.Limit == 5 && r.Remaining == 4 }, "the node's share, limit 5 of 10 over 2 nodes"},
	} {
		cfg := testConfig()
		cfg.Store = Store{Type: StoreRedis, Addrs: []string{rd.Addr()}, Prefix: "fgpolicy" + c.policy}
		cfg.Arrangement.Mode = distributed.Centralized // the policy decides at the first failed call
		cfg.Arrangement.Nodes = 2
		cfg.Gubernator.OnFailure = c.policy
		r := start(t, cfg)
		rd.Kill()
		resp, err := guberCall(t, r, &gubernatorpb.RateLimitReq{Name: "p", UniqueKey: c.policy, Hits: 1, Limit: 10, Duration: 600_000})
		if err != nil || !c.check(resp[0]) {
			t.Errorf("on_failure %s with Redis down: %v %v, want %s", c.policy, resp, err, c.want)
		}
		rd.Restart()
	}
}
