package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// FuzzCheck drives POST /v1/check with arbitrary bodies. Whatever the body,
// the answer is 200, 400 or 413 (never 500, never a failure to decide on an
// in-memory store), it is a JSON object, and a 200 is given only for a body
// that is a well-formed check request in valid UTF-8.
func FuzzCheck(f *testing.F) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		f.Fatal(err)
	}
	const limit = 1024
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{})), MaxBodyBytes: limit})
	if err != nil {
		f.Fatal(err)
	}

	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hits":1}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}]}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hits":999999999999}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hits":-1}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"","value":"x"}]}]}`))
	f.Add([]byte(`{"descriptors":[{"entries":[]}]}`))
	f.Add([]byte(`{"descriptors":[]}`))
	f.Add([]byte(`{"domain":"other","descriptors":[{"entries":[{"key":"a","value":"b"},{"key":"c","value":"d"}]}]}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}]} {}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"extra":1}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}],"limit":{"requests_per_unit":2,"unit":"minute","unit_multiplier":3}}]}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}],"limit":{"requests_per_unit":2,"unit":"YEAR","unit_multiplier":99}}]}`))
	f.Add([]byte(`{"hits":1.5}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"usage":{"model":"m","input_tokens":5,"output_tokens":-1}}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"usage":{"model":"m","cached_input_tokens":99999999999}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"\u0000\ud800"}]}]}`))
	f.Add([]byte("{\"descriptors\":[{\"entries\":[{\"key\":\"client\",\"value\":\"J\xff\"}]}]}"))
	f.Add([]byte("{\"descriptors\":[{\"entries\":[{\"key\":\"cl\xc0\xafient\",\"value\":\"J\"}]}]}"))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"\ud83d\ude00 \\ud800"}]}]}`))
	f.Add([]byte(`{"descriptors":[{"entries":[{"key":"client","value":"\udc00\ud800"}]}]}`))
	f.Add(append([]byte(`{"domain":"`), append(bytes.Repeat([]byte("x"), 2*limit), `"}`...)...))

	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)

		code := rec.Code
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for body %q: %s", code, body, rec.Body.Bytes())
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("content type %q for body %q", ct, body)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			t.Fatalf("answer %q to body %q is not a JSON object: %v", rec.Body.Bytes(), body, err)
		}
		if code != http.StatusOK {
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("status %d without an error message: %q", code, rec.Body.Bytes())
			}
			if code == http.StatusRequestEntityTooLarge && len(body) <= limit {
				t.Fatalf("413 for a %d-byte body (limit %d)", len(body), limit)
			}
			return
		}
		if len(body) > limit {
			t.Fatalf("200 for a %d-byte body (limit %d)", len(body), limit)
		}
		if !utf8.Valid(body) || loneSurrogate(body) >= 0 {
			t.Fatalf("200 for a body that is not valid UTF-8 text: %q", body)
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var in CheckRequest
		if err := dec.Decode(&in); err != nil {
			t.Fatalf("200 for a body that is not a check request (%v): %q", err, body)
		}
		if len(in.Descriptors) == 0 || in.Hits < 0 {
			t.Fatalf("200 for an invalid check request %q", body)
		}
		var out CheckResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("200 answer is not a CheckResponse: %v", err)
		}
		if (out.Code == "OK") != out.Allowed || (out.Code != "OK" && out.Code != "OVER_LIMIT") {
			t.Fatalf("code %q with allowed=%v", out.Code, out.Allowed)
		}
		if !out.Allowed && out.RetryAfter < 1 {
			t.Fatalf("over the limit with retry_after %d", out.RetryAfter)
		}
		for _, s := range out.Statuses {
			if s.Descriptor < 0 || s.Descriptor >= len(in.Descriptors) {
				t.Fatalf("status names descriptor %d of %d", s.Descriptor, len(in.Descriptors))
			}
		}
	})
}
