package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rls"
	"github.com/floodgate-dev/floodgate/rules"
)

// envoyServer serves /json over the RLS front end, on a real listener.
func envoyServer(t *testing.T) *httptest.Server {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	svc := rls.New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil)
	h, err := NewEnvoyJSON(EnvoyJSONOptions{Service: svc, MaxBodyBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/json", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func postRaw(t *testing.T, url, body string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A client of envoyproxy/ratelimit's /json endpoint gets the same answers:
// 200 and the response in the protobuf JSON mapping while under the limit,
// 429 with overallCode OVER_LIMIT past it.
func TestEnvoyJSONDropIn(t *testing.T) {
	srv := envoyServer(t)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hitsAddend":1}`
	for i, want := range []int{200, 200, 429} {
		code, h, got := postRaw(t, srv.URL+"/json", body)
		if code != want {
			t.Fatalf("call %d: status %d, want %d: %s", i, code, want, got)
		}
		if ct := h.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		var m struct {
			OverallCode string `json:"overallCode"`
			Statuses    []struct {
				Code         string `json:"code"`
				CurrentLimit struct {
					Name            string `json:"name"`
					RequestsPerUnit int    `json:"requestsPerUnit"`
					Unit            string `json:"unit"`
				} `json:"currentLimit"`
				LimitRemaining     int    `json:"limitRemaining"`
				DurationUntilReset string `json:"durationUntilReset"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatalf("answer %q: %v", got, err)
		}
		wantCode := map[int]string{200: "OK", 429: "OVER_LIMIT"}[want]
		if m.OverallCode != wantCode || len(m.Statuses) != 1 || m.Statuses[0].Code != wantCode {
			t.Fatalf("call %d: %s", i, got)
		}
		st := m.Statuses[0]
		if st.CurrentLimit.Name != "per-client" || st.CurrentLimit.RequestsPerUnit != 2 || st.CurrentLimit.Unit != "MINUTE" ||
			st.LimitRemaining != max(0, 1-i) || !strings.HasSuffix(st.DurationUntilReset, "s") {
			t.Errorf("call %d: status %+v", i, st)
		}
		// Zero fields are left out, as protojson writes them.
		if i == 1 && strings.Contains(got, "limitRemaining") {
			t.Errorf("zero limitRemaining written: %s", got)
		}
	}
	// The proto's own field names are read too.
	code, _, got := postRaw(t, srv.URL+"/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"b"}]}],"hits_addend":3}`)
	var over struct{ OverallCode string }
	if err := json.Unmarshal([]byte(got), &over); err != nil || code != 429 || over.OverallCode != "OVER_LIMIT" {
		t.Errorf("hits_addend 3 over a limit of 2: %d %s", code, got)
	}
}

// Malformed or refused requests are 400 "Bad Request", as envoyproxy/ratelimit
// answers; an oversized body is 413.
func TestEnvoyJSONErrors(t *testing.T) {
	srv := envoyServer(t)
	for _, body := range []string{
		`not json`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}],"nope":1}`,
		`{"domain":"","descriptors":[{"entries":[{"key":"client","value":"a"}]}]}`,
		`{"domain":"edge"}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"","value":"a"}]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}]}],"hitsAddend":-1}`,
	} {
		t.Run(body, func(t *testing.T) {
			code, _, got := postRaw(t, srv.URL+"/json", body)
			if code != 400 || got != "Bad Request\n" {
				t.Errorf("%s: %d %q, want 400 Bad Request", body, code, got)
			}
		})
	}
	code, _, _ := postRaw(t, srv.URL+"/json", `{"domain":"`+strings.Repeat("x", 2000)+`"}`)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", code)
	}
}

// /v1/check carries the middleware's rate-limit header fields, and says
// when no rule applied.
func TestCheckHeadersAndUnmatched(t *testing.T) {
	srv := server(t)
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"hdr"}]}]}`
	for i := range 3 {
		resp, err := http.Post(srv.URL+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if h.Get("X-RateLimit-Limit") != "2" || h.Get("RateLimit-Policy") != `"per-client";q=2;w=60` ||
			!strings.HasPrefix(h.Get("RateLimit"), `"per-client";r=`) || h.Get("X-RateLimit-Reset") == "" {
			t.Errorf("call %d: headers %v", i, h)
		}
		if wantRetry := i == 2; (h.Get("Retry-After") != "") != wantRetry {
			t.Errorf("call %d: Retry-After %q", i, h.Get("Retry-After"))
		}
		if h.Get("X-RateLimit-Remaining") != []string{"1", "0", "0"}[i] {
			t.Errorf("call %d: remaining %q", i, h.Get("X-RateLimit-Remaining"))
		}
	}
	for _, c := range []struct{ body, unmatched, note string }{
		{`{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"x"}]}]}`, "domain", `the rules have domain "edge"`},
		{`{"domain":"edge","descriptors":[{"entries":[{"key":"path","value":"/"}]}]}`, "rules", `no rule of domain "edge" matches`},
		{`{"descriptors":[{"entries":[{"key":"client","value":"y"}]}]}`, "", ""},
	} {
		t.Run(c.body, func(t *testing.T) {
			code, m := post(t, srv.URL+"/v1/check", c.body)
			got, _ := m["unmatched"].(string)
			note, _ := m["note"].(string)
			if code != 200 || m["allowed"] != true || got != c.unmatched || !strings.Contains(note, c.note) || (c.note == "") != (note == "") {
				t.Errorf("%s: %d %v", c.body, code, m)
			}
		})
	}
}
