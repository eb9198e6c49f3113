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

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
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

// TestGubernatorAPIOnRedis: with a Redis store the API answers each
// request with an error saying it needs the memory store.
func TestGubernatorAPIOnRedis(t *testing.T) {
	rd := redistest.Start(t)
	cfg := testConfig()
	cfg.Store = Store{Type: StoreRedis, Addrs: []string{rd.Addr()}, Prefix: "fgguber"}
	r := start(t, cfg)
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := gubernatorpb.NewV1Client(conn).GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		{Name: "api", UniqueKey: "u1", Hits: 1, Limit: 2, Duration: 60_000}}})
	if err != nil || !strings.Contains(resp.Responses[0].Error, "memory store only") {
		t.Fatalf("%v %v", resp, err)
	}
}
