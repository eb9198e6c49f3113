package gubernator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator/gubernatorpb"
)

// FuzzGetRateLimitsHTTP sends any body to POST /v1/GetRateLimits: the
// server never panics, answers 200 with one answer per request the body
// holds, or 400 (malformed) or 413 (too large) with the gateway's error body.
func FuzzGetRateLimitsHTTP(f *testing.F) {
	for _, seed := range []string{
		`{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":10,"duration":1000}]}`,
		`{"requests":[{"name":"n","unique_key":"k","hits":"-3","limit":"10","duration":"4","behavior":"DURATION_IS_GREGORIAN","algorithm":1}]}`,
		`{"requests":[{"name":"n","uniqueKey":"k","hits":1,"limit":1,"duration":1,"burst":9,"behavior":44,"createdAt":"1"}]}`,
		`{"requests":[{"name":"n","unique_key":"k","hits":9223372036854775807,"limit":-9223372036854775808}]}`,
		`{"requests":[{}, null]}`, `{}`, `[]`, `{"requests":[`, "\x00", `{"requests":[{"metadata":{"a":"b"}}]}`,
		`{"requests":[{"name":"n","unique_key":"k","hits":3,"limit":2,"duration":1000,"algorithm":"LEAKY_BUCKET","burst":4,"max_wait":"5000"}]}`,
		`{"requests":[{"name":"n","unique_key":"k","hits":1,"limit":2,"duration":3,"behavior":4,"maxWait":-1}]}`,
	} {
		f.Add(seed)
	}
	var hs []http.Handler
	for _, v := range versions {
		s, _ := newTestService(v)
		hs = append(hs, s.Handler(1<<16))
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, h := range hs {
			fuzzOne(t, h, body)
		}
	})
}

// fuzzOne posts body to h and checks the answer.
func fuzzOne(t *testing.T, h http.Handler, body string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, PathGetRateLimits, strings.NewReader(body)))
	var req gubernatorpb.GetRateLimitsReq
	decodeErr := jsonIn.Unmarshal([]byte(body), &req)
	switch w.Code {
	case http.StatusOK:
		if decodeErr != nil {
			t.Fatalf("200 for a body that does not decode: %v", decodeErr)
		}
		var resp gubernatorpb.GetRateLimitsResp
		if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("answer is not gubernator's JSON: %v", err)
		}
		if len(resp.Responses) != len(req.Requests) {
			t.Fatalf("%d answers for %d requests", len(resp.Responses), len(req.Requests))
		}
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		if decodeErr == nil && w.Code == http.StatusBadRequest && len(req.Requests) <= MaxBatch {
			t.Fatalf("400 for a body that decodes: %s", w.Body)
		}
		if !strings.Contains(w.Body.String(), `"code"`) {
			t.Fatalf("error body without a code: %s", w.Body)
		}
	default:
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}
