package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const testRules = `
domain: edge
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 2
    window: 1m
    algorithm: fixed-window
  - name: dark
    match: {client: "*"}
    count_by: [client]
    limit: 1
    window: 1m
    shadow: true
`

func server(t *testing.T) *httptest.Server {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{})), MaxBodyBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var m map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", data, err)
	}
	return resp.StatusCode, m
}

func TestCheck(t *testing.T) {
	srv := server(t)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hits":1}`
	for i := 0; i < 2; i++ {
		code, m := post(t, srv.URL+"/v1/check", body)
		if code != 200 || m["allowed"] != true || m["code"] != "OK" {
			t.Fatalf("check %d: %d %v", i, code, m)
		}
		sts := m["statuses"].([]any)
		if len(sts) != 2 {
			t.Fatalf("want every rule's status, got %v", sts)
		}
		st := sts[0].(map[string]any)
		if st["rule"] != "per-client" || st["limit"] != 2.0 || st["remaining"] != float64(1-i) || st["window"] != "1m" || st["algorithm"] != "fixed-window" {
			t.Fatalf("status %v", st)
		}
	}
	code, m := post(t, srv.URL+"/v1/check", body)
	if code != 200 || m["allowed"] != false || m["code"] != "OVER_LIMIT" || m["retry_after"].(float64) < 1 {
		t.Fatalf("3rd check: %d %v", code, m)
	}
	rej := m["rejected"].([]any)
	if len(rej) != 2 || m["tightest"] != "per-client" {
		t.Fatalf("rejected %v tightest %v: want both rules named, the enforcing one tightest", rej, m["tightest"])
	}
	// Domain may be left out: the rule set's own domain.
	code, m = post(t, srv.URL+"/v1/check", `{"descriptors":[{"entries":[{"key":"client","value":"other"}]}]}`)
	if code != 200 || m["allowed"] != true || len(m["statuses"].([]any)) != 2 {
		t.Fatalf("no domain: %d %v", code, m)
	}
}

// A descriptor's limit replaces the rules for it, as Envoy's override does.
func TestCheckLimitOverride(t *testing.T) {
	srv := server(t)
	body := `{"descriptors":[{"entries":[{"key":"client","value":"acme"}],"limit":{"requests_per_unit":1,"unit":"minute","unit_multiplier":2}}]}`
	code, m := post(t, srv.URL+"/v1/check", body)
	if code != 200 || m["allowed"] != true {
		t.Fatalf("first check under an override of 1: %d %v", code, m)
	}
	sts := m["statuses"].([]any)
	st := sts[0].(map[string]any)
	if len(sts) != 1 || st["rule"] != "limit-override" || st["limit"] != 1.0 || st["window"] != "2m" {
		t.Fatalf("statuses %v: want only the override, 1 per 2m", sts)
	}
	if code, m = post(t, srv.URL+"/v1/check", body); code != 200 || m["allowed"] != false {
		t.Fatalf("second check over an override of 1: %d %v", code, m)
	}
}

func TestCheckErrors(t *testing.T) {
	srv := server(t)
	cases := []struct {
		body string
		code int
		msg  string
	}{
		{`{"domain":"edge"`, 400, "malformed"},
		{`[1,2]`, 400, "malformed"},
		{`{"domain":"edge","descriptors":[]}`, 400, "at least one"},
		{`{"descriptors":[{"entries":[{"key":"","value":"a"}]}]}`, 400, "key is empty"},
		{`{"descriptors":[{"entries":[]}]}`, 400, "no entries"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}]}],"hits":-1}`, 400, "hits"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}]}],"bogus":1}`, 400, "unknown field"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}]}]} {}`, 400, "after the JSON"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}],"limit":{"requests_per_unit":5,"unit":"fortnight"}}]}`, 400, "descriptors[0].limit.unit"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}],"limit":{"requests_per_unit":-5,"unit":"second"}}]}`, 400, "requests_per_unit"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"a"}],"limit":{"requests_per_unit":5,"unit":"year","unit_multiplier":2}}]}`, 400, "unit_multiplier"},
		{`{"descriptors":[{"entries":[{"key":"client","value":"` + strings.Repeat("x", 2000) + `"}]}]}`, 413, "larger than 1024"},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			code, m := post(t, srv.URL+"/v1/check", c.body)
			msg, _ := m["error"].(string)
			if code != c.code || !strings.Contains(msg, c.msg) {
				t.Errorf("%.60s: %d %q, want %d containing %q", c.body, code, msg, c.code, c.msg)
			}
		})
	}
	resp, err := http.Get(srv.URL + "/v1/check")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET /v1/check: %d", resp.StatusCode)
	}
}

func TestRules(t *testing.T) {
	srv := server(t)
	resp, err := http.Get(srv.URL + "/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out RulesResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Domain != "edge" || len(out.Rules) != 2 || out.Rules[0].Name != "per-client" || out.Rules[0].Limit != 2 ||
		out.Rules[0].Window != time.Minute || !out.Rules[1].Shadow || out.Rules[0].Key != "client" {
		t.Fatalf("rules %+v", out)
	}
}
