package gubernator

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
	"github.com/floodgate-dev/floodgate/memstore"
)

// testClock is a clock the test moves by hand.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func newTestService() (*Service, *testClock) {
	c := &testClock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	return New(Options{Store: memstore.New(memstore.Options{}), Clock: c.now, Advertise: func() string { return "127.0.0.1:1" }}), c
}

func i64(v int64) *int64 { return &v }

func TestGetRateLimits(t *testing.T) {
	s, c := newTestService()
	ctx := context.Background()
	at := c.t.UnixMilli()
	req := func(hits int64) *gubernatorpb.RateLimitReq {
		return &gubernatorpb.RateLimitReq{Name: "send", UniqueKey: "acct:1", Hits: hits, Limit: 2, Duration: 60_000}
	}
	resp, err := s.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		req(1), req(1), req(1), // one key three times, in order
		{Name: "send", Hits: 1, Limit: 1},
		{UniqueKey: "x", Hits: 1, Limit: 1},
		{Name: "n", UniqueKey: "k", Algorithm: 7},
		{Name: "n", UniqueKey: "k", Limit: -1},
		{Name: "n", UniqueKey: "k", Limit: 1, Algorithm: gubernatorpb.Algorithm_LEAKY_BUCKET, Duration: 0},
		{Name: "n", UniqueKey: "w", Limit: 1, Duration: 3, Behavior: gubernatorpb.Behavior_DURATION_IS_GREGORIAN},
		{Name: "n", UniqueKey: "c", Limit: 5, Hits: 1, Duration: 1000, CreatedAt: i64(at - 500)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"UNDER_LIMIT 2 1 " + itoa(at+60_000),
		"UNDER_LIMIT 2 0 " + itoa(at+60_000),
		"OVER_LIMIT 2 0 " + itoa(at+60_000),
		"error: field 'unique_key' cannot be empty",
		"error: field 'namespace' cannot be empty",
		"error: Error while apply rate limit for 'n_k': during workerPool.GetRateLimit: Invalid rate limit algorithm '7'",
		"error: Error while apply rate limit for 'n_k': floodgate: field 'limit' must be between 0 and 4294967295, got -1",
		"error: Error while apply rate limit for 'n_k': floodgate: field 'duration' must be between 1 and 31622400000 milliseconds, got 0",
		"error: Error while apply rate limit for 'n_w': during workerPool.GetRateLimit: Error in tokenBucket: `Duration = GregorianWeeks` not yet supported; consider making a PR!`",
		"UNDER_LIMIT 5 4 " + itoa(at+500), // created_at given: the reset counts from it
	}
	for i, r := range resp.Responses {
		got := r.Status.String() + " " + itoa(r.Limit) + " " + itoa(r.Remaining) + " " + itoa(r.ResetTime)
		if r.Error != "" {
			got = "error: " + r.Error
		}
		if got != want[i] {
			t.Errorf("answer %d: %s\nwant %s", i, got, want[i])
		}
	}
	c.t = c.t.Add(61 * time.Second)
	resp, _ = s.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{req(1)}})
	if r := resp.Responses[0]; r.Remaining != 1 || r.Status != gubernatorpb.Status_UNDER_LIMIT {
		t.Fatalf("after the window: %v", r)
	}
	many := &gubernatorpb.GetRateLimitsReq{Requests: make([]*gubernatorpb.RateLimitReq, MaxBatch+1)}
	if _, err := s.GetRateLimits(ctx, many); status.Code(err) != codes.OutOfRange {
		t.Fatalf("%d requests: %v, want OutOfRange", MaxBatch+1, err)
	}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

func TestHealthCheck(t *testing.T) {
	s, _ := newTestService()
	h, err := s.HealthCheck(context.Background(), &gubernatorpb.HealthCheckReq{})
	if err != nil || h.Status != Healthy || h.PeerCount != 1 || h.AdvertiseAddress != "127.0.0.1:1" {
		t.Fatalf("%v %v", h, err)
	}
	s.o.Ready = func(context.Context) (bool, string) { return false, "store down" }
	if _, err := s.HealthCheck(context.Background(), &gubernatorpb.HealthCheckReq{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("unready: %v, want Unavailable", err)
	}
}

// TestOverGRPC calls the service as gubernator's clients do, through the
// generated client over a real connection.
func TestOverGRPC(t *testing.T) {
	s, _ := newTestService()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := gubernatorpb.NewV1Client(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := cl.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		{Name: "a", UniqueKey: "b", Hits: 3, Limit: 2, Duration: 1000, Algorithm: gubernatorpb.Algorithm_LEAKY_BUCKET}}})
	if err != nil || resp.Responses[0].Status != gubernatorpb.Status_OVER_LIMIT {
		t.Fatalf("%v %v", resp, err)
	}
	if _, err := cl.LiveCheck(ctx, &gubernatorpb.LiveCheckReq{}); err != nil {
		t.Fatal(err)
	}
}

func TestHTTP(t *testing.T) {
	s, c := newTestService()
	srv := httptest.NewServer(s.Handler(1 << 10))
	defer srv.Close()
	do := func(method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: %d %q: not JSON", method, path, resp.StatusCode, b)
		}
		return resp.StatusCode, m
	}
	at := c.t.UnixMilli()
	// Proto names and lowerCamel names, numbers as strings or numbers,
	// enums by name or number, unknown fields ignored: what the gateway takes.
	code, m := do("POST", PathGetRateLimits, `{"requests":[{"name":"n","unique_key":"k","hits":"1","limit":5,"duration":"1000","algorithm":"TOKEN_BUCKET","behavior":32,"extra":true},
		{"name":"n","uniqueKey":"k2","hits":1,"limit":5,"duration":1000,"createdAt":"`+itoa(at-10)+`"}]}`)
	want := `{"responses":[{"error":"","limit":"5","metadata":{},"remaining":"4","reset_time":"` + itoa(at+1000) + `","status":"UNDER_LIMIT"},` +
		`{"error":"","limit":"5","metadata":{},"remaining":"4","reset_time":"` + itoa(at+990) + `","status":"UNDER_LIMIT"}]}`
	if got, _ := json.Marshal(m); code != 200 || string(got) != want {
		t.Fatalf("GetRateLimits: %d %s\nwant 200 %s", code, got, want)
	}
	code, m = do("GET", PathHealthCheck, "")
	if got, _ := json.Marshal(m); code != 200 || string(got) != `{"advertise_address":"127.0.0.1:1","message":"","peer_count":1,"status":"healthy"}` {
		t.Fatalf("HealthCheck: %d %s", code, got)
	}
	for _, tc := range []struct {
		method, path, body string
		code               int
		grpc               float64
	}{
		{"POST", PathGetRateLimits, `{"requests":[`, 400, 3},
		{"POST", PathGetRateLimits, `{"requests":[{"hits":"x"}]}`, 400, 3},
		{"POST", PathGetRateLimits, `{"requests":{"name":"n"}}`, 400, 3},
		{"GET", PathGetRateLimits, ``, 501, 12},
		{"POST", PathHealthCheck, ``, 501, 12},
		{"POST", PathGetRateLimits, `{"requests":[` + strings.Repeat(`{},`, 600) + `{}]}`, 413, 8},
	} {
		code, m := do(tc.method, tc.path, tc.body)
		if code != tc.code || m["code"] != tc.grpc || m["message"] == "" {
			t.Errorf("%s %s %.30q: %d %v, want %d with code %v", tc.method, tc.path, tc.body, code, m, tc.code, tc.grpc)
		}
	}
}
