package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

const fivePerClient = `
domain: api
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 5
    window: 1h
`

// post sends body as JSON to url and returns the status and body.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A JSON API caller at its limit cannot lift it with a limit of its own:
// by default the API refuses overrides with 400, on /v1/check and on the
// envoyproxy/ratelimit /json endpoint; with limit_overrides: ignore the
// rules decide; the RLS listener applies Envoy's overrides.
func TestOverridePolicyPerListener(t *testing.T) {
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(fivePerClient), 0o644); err != nil {
		t.Fatal(err)
	}
	const plain = `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"c1"}]}]}`
	const lifted = `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"c1"}],` +
		`"limit":{"requests_per_unit":4294967294,"unit":"hour"}}]}`
	for _, tc := range []struct {
		policy   string
		wantCode int
		wantBody string
	}{
		{"", http.StatusBadRequest, "limit overrides are refused here"},
		{"reject", http.StatusBadRequest, "limit overrides are refused here"},
		{"ignore", http.StatusOK, `"allowed":false`},
		{"allow", http.StatusOK, `"allowed":true`},
	} {
		t.Run("http="+tc.policy, func(t *testing.T) {
			cfg := testConfig()
			cfg.Rules = rulesFile
			if tc.policy != "" {
				cfg.HTTP.LimitOverrides = tc.policy
			}
			r := start(t, cfg)
			for i := range 5 {
				if code, body := post(t, r.url("/v1/check"), plain); code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
					t.Fatalf("request %d of 5: %d %s", i+1, code, body)
				}
			}
			code, body := post(t, r.url("/v1/check"), lifted)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("/v1/check at 5/5 with requests_per_unit 4294967294: %d %s, want %d with %s", code, body, tc.wantCode, tc.wantBody)
			}
			// The envoyproxy/ratelimit endpoint, on the same listener, has
			// the same policy (and answers a refusal as that server answers
			// a bad request: 400 "Bad Request").
			code, body = post(t, r.url("/json"), `{"domain":"api","descriptors":[{"entries":[{"key":"client","value":"c1"}],`+
				`"limit":{"requestsPerUnit":4294967294,"unit":"HOUR"}}]}`)
			want := map[string]int{"": http.StatusBadRequest, "reject": http.StatusBadRequest,
				"ignore": http.StatusTooManyRequests, "allow": http.StatusOK}[tc.policy]
			if code != want {
				t.Fatalf("/json at 5/5 with requestsPerUnit 4294967294: %d %s, want %d", code, body, want)
			}
		})
	}
	t.Run("grpc default allows Envoy's overrides", func(t *testing.T) {
		cfg := testConfig()
		cfg.Rules = rulesFile
		r := start(t, cfg)
		c, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
		d := &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c2"}},
			Limit:   &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR},
		}
		req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{d}}
		var codes []rlsv3.RateLimitResponse_Code
		for range 2 {
			resp, err := c.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, resp.OverallCode)
		}
		if codes[0] != rlsv3.RateLimitResponse_OK || codes[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("an override of 1 per hour over RLS: %v, want OK then OVER_LIMIT", codes)
		}
	})
}

// A listener's limit_overrides must be one of the three names.
func TestOverridePolicyConfig(t *testing.T) {
	_, err := ParseConfig("f.yaml", []byte("http:\n  limit_overrides: maybe\n"))
	if err == nil || !strings.Contains(err.Error(), "http.limit_overrides") || !strings.Contains(err.Error(), "allow, ignore or reject") {
		t.Fatalf("err = %v", err)
	}
	c, err := ParseConfig("f.yaml", []byte("grpc:\n  limit_overrides: ignore\n"))
	if err != nil || c.GRPC.LimitOverrides != "ignore" || c.HTTP.LimitOverrides != "reject" {
		t.Fatalf("config %+v %+v, err %v", c.GRPC, c.HTTP, err)
	}
}
