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

	gubernatoralg "github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
	"github.com/floodgate-dev/floodgate/memstore"
)

// testClock is a clock the test moves by hand.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time { return c.t }

func newTestService(v gubernatoralg.Version) (*Service, *testClock) {
	c := &testClock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)} // a Friday
	return New(Options{Store: memstore.New(memstore.Options{}), Clock: c.now, Advertise: func() string { return "127.0.0.1:1" }, Version: v}), c
}

// versions names the versions the tests run as.
var versions = map[string]gubernatoralg.Version{"v2.21": gubernatoralg.V221, "v2.13": gubernatoralg.V213}

func i64(v int64) *int64 { return &v }

func TestGetRateLimits(t *testing.T) {
	for name, v := range versions {
		t.Run(name, func(t *testing.T) { testGetRateLimits(t, v) })
	}
}

func testGetRateLimits(t *testing.T, v gubernatoralg.Version) {
	s, c := newTestService(v)
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
	if v == gubernatoralg.V221 { // weeks are periods: this one ends on Sunday
		want[8] = "UNDER_LIMIT 1 1 " + itoa(time.Date(2026, 5, 3, 23, 59, 59, 999e6, time.Local).UnixMilli())
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
	s, _ := newTestService(gubernatoralg.V221)
	h, err := s.HealthCheck(context.Background(), &gubernatorpb.HealthCheckReq{})
	if err != nil || h.Status != Healthy || h.PeerCount != 1 || h.AdvertiseAddress != "127.0.0.1:1" ||
		len(h.LocalPeers) != 1 || h.LocalPeers[0].GrpcAddress != "127.0.0.1:1" || len(h.RegionPeers) != 0 {
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
	s, _ := newTestService(gubernatoralg.V221)
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
	for name, v := range versions {
		t.Run(name, func(t *testing.T) { testHTTP(t, v) })
	}
}

// testHTTP: the gateway's JSON, with v2.21.0's fields (retry_after,
// local_peers, region_peers) as v2.21 and without them as v2.13.
func testHTTP(t *testing.T, v gubernatoralg.Version) {
	s, c := newTestService(v)
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
	retry, peers := `"retry_after":"0",`, `"local_peers":[{"data_center":"","grpc_address":"127.0.0.1:1"}],`
	region := `,"region_peers":[]`
	if v == gubernatoralg.V213 {
		retry, peers, region = "", "", ""
	}
	want := `{"responses":[{"error":"","limit":"5","metadata":{},"remaining":"4","reset_time":"` + itoa(at+1000) + `",` + retry + `"status":"UNDER_LIMIT"},` +
		`{"error":"","limit":"5","metadata":{},"remaining":"4","reset_time":"` + itoa(at+990) + `",` + retry + `"status":"UNDER_LIMIT"}]}`
	if got, _ := json.Marshal(m); code != 200 || string(got) != want {
		t.Fatalf("GetRateLimits: %d %s\nwant 200 %s", code, got, want)
	}
	code, m = do("GET", PathHealthCheck, "")
	want = `{"advertise_address":"127.0.0.1:1",` + peers + `"message":"","peer_count":1` + region + `,"status":"healthy"}`
	if got, _ := json.Marshal(m); code != 200 || string(got) != want {
		t.Fatalf("HealthCheck: %d %s\nwant %s", code, got, want)
	}
	if v == gubernatoralg.V221 { // max_wait as the gateway reads it, retry_after as it writes it
		body := `{"requests":[{"name":"w","unique_key":"k","hits":2,"limit":2,"duration":60000,"algorithm":"LEAKY_BUCKET"},` +
			`{"name":"w","unique_key":"k","hits":1,"limit":2,"duration":60000,"algorithm":"LEAKY_BUCKET","max_wait":"60000"},` +
			`{"name":"w","unique_key":"k","hits":1,"limit":2,"duration":60000,"algorithm":"LEAKY_BUCKET","maxWait":1}]}`
		code, m = do("POST", PathGetRateLimits, body)
		rs, _ := m["responses"].([]any)
		if code != 200 || len(rs) != 3 || rs[1].(map[string]any)["status"] != "SCHEDULED" || rs[1].(map[string]any)["retry_after"] != "30000" ||
			rs[2].(map[string]any)["status"] != "OVER_LIMIT" || rs[2].(map[string]any)["retry_after"] != "60000" {
			t.Fatalf("max_wait: %d %v", code, m)
		}
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

// TestMaxWait: as v2.21, max_wait is checked as gubernator v2.21.0 checks
// it (each refusal its text), and a leaky bucket books hits ahead
// (SCHEDULED with retry_after) or refuses them with the wait needed; where
// the arrangement cannot keep a booking (NoSchedule) each max_wait request
// gets an error naming the field. As v2.13, the field is ignored, as
// v2.13.0 (which has no such field) ignores it.
func TestMaxWait(t *testing.T) {
	ctx := context.Background()
	leaky := func(key string, hits, maxWait int64, b gubernatorpb.Behavior) *gubernatorpb.RateLimitReq {
		return &gubernatorpb.RateLimitReq{Name: "mw", UniqueKey: key, Hits: hits, Limit: 10, Duration: 60_000,
			Algorithm: gubernatorpb.Algorithm_LEAKY_BUCKET, Burst: 10, MaxWait: maxWait, Behavior: b}
	}
	token := leaky("t", 1, 10, 0)
	token.Algorithm = gubernatorpb.Algorithm_TOKEN_BUCKET
	s, c := newTestService(gubernatoralg.V221)
	at := c.t.UnixMilli()
	resp, err := s.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		leaky("e", 1, -1, 0), token,
		leaky("e", 1, 10, gubernatorpb.Behavior_GLOBAL),
		leaky("e", 1, 10, gubernatorpb.Behavior_DURATION_IS_GREGORIAN),
		leaky("e", 1, 10, gubernatorpb.Behavior_DRAIN_OVER_LIMIT),
		leaky("e", 1, 10, gubernatorpb.Behavior_RESET_REMAINING),
		leaky("e", -1, 10, 0),
		leaky("k", 10, 0, 0),       // empties the bucket
		leaky("k", 2, 12_000, 0),   // two tokens: 12 s
		leaky("k", 1, 12_000, 0),   // 18 s: past max_wait
		leaky("k", 11, 600_000, 0), // more than the burst
		leaky("k", 0, 0, 0),        // in debt: remaining 0, reset when full
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"error: field 'max_wait' cannot be negative",
		"error: max_wait is only supported by LEAKY_BUCKET",
		"error: max_wait cannot be combined with GLOBAL",
		"error: max_wait cannot be combined with DURATION_IS_GREGORIAN",
		"error: max_wait cannot be combined with DRAIN_OVER_LIMIT",
		"error: max_wait cannot be combined with RESET_REMAINING",
		"error: max_wait cannot be combined with negative hits",
		"UNDER_LIMIT 0 " + itoa(at+60_000) + " 0",
		"SCHEDULED 0 " + itoa(at+72_000) + " 12000",
		"OVER_LIMIT 0 " + itoa(at+72_000) + " 18000",
		"NEVER_FITS 0 " + itoa(at+72_000) + " 0",
		"UNDER_LIMIT 0 " + itoa(at+72_000) + " 0",
	}
	for i, r := range resp.Responses {
		got := r.Status.String() + " " + itoa(r.Remaining) + " " + itoa(r.ResetTime) + " " + itoa(r.RetryAfter)
		if r.Error != "" {
			got = "error: " + r.Error
		}
		if got != want[i] {
			t.Errorf("answer %d: %s\nwant %s", i, got, want[i])
		}
	}

	s.o.NoSchedule = "with arrangement.mode delayed"
	resp, _ = s.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{leaky("n", 1, 10, 0), leaky("n", 1, 0, 0)}})
	if e := resp.Responses[0].Error; !strings.Contains(e, "field 'max_wait' is not supported with arrangement.mode delayed") || resp.Responses[1].Error != "" {
		t.Errorf("NoSchedule: %v", resp.Responses)
	}

	old, _ := newTestService(gubernatoralg.V213)
	resp, _ = old.GetRateLimits(ctx, &gubernatorpb.GetRateLimitsReq{Requests: []*gubernatorpb.RateLimitReq{
		leaky("k", 10, 0, 0), leaky("k", 2, 12_000, 0), leaky("k", 1, -1, gubernatorpb.Behavior_GLOBAL)}})
	for i, r := range resp.Responses[1:] {
		if r.Error != "" || r.Status != gubernatorpb.Status_OVER_LIMIT || r.RetryAfter != 0 {
			t.Errorf("v2.13, request %d with max_wait: %v, want OVER_LIMIT as without it", i+1, r)
		}
	}
}
