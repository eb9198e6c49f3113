package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// FuzzSettle drives POST /v1/charge and /v1/release with arbitrary bodies:
// the answer is 200, 400 or 413 (never 500, never a failure on an
// in-memory store) and always a JSON object, with an error message unless
// it is 200.
func FuzzSettle(f *testing.F) {
	set, err := rules.Parse("rules.yaml", []byte(settleRules))
	if err != nil {
		f.Fatal(err)
	}
	const limit = 1024
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{})), MaxBodyBytes: limit})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		`{"hits":800,"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`,
		`{"descriptors":[{"entries":[{"key":"stream","value":"s"}]}]}`,
		`{"hits":-5,"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`,
		`{"hits":99999999999999,"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`,
		`{"peek":true,"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]}`,
		`{"descriptors":[]}`, `null`, ``, `{} {}`,
	} {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, release bool, body []byte) {
		path := "/v1/charge"
		if release {
			path = "/v1/release"
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s: status %d for body %q: %s", path, rec.Code, body, rec.Body.Bytes())
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			t.Fatalf("%s: answer %q is not a JSON object: %v", path, rec.Body.Bytes(), err)
		}
		if _, ok := obj["error"]; rec.Code != http.StatusOK && !ok {
			t.Fatalf("%s: status %d without an error: %q", path, rec.Code, rec.Body.Bytes())
		}
	})
}
