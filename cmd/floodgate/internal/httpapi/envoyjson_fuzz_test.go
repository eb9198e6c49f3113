package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rls"
	"github.com/floodgate-dev/floodgate/rules"
)

// FuzzEnvoyJSON drives POST /json with arbitrary bodies. Whatever the body,
// nothing panics; the answer is 200, 429 (with a RateLimitResponse of the
// matching overall code), or 400 "Bad Request" / 413 (never a failure to
// decide on an in-memory store).
func FuzzEnvoyJSON(f *testing.F) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		f.Fatal(err)
	}
	h, err := NewEnvoyJSON(EnvoyJSONOptions{Service: rls.New(rules.NewEngine(set, memstore.New(memstore.Options{})), nil), MaxBodyBytes: 1024})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"acme"}]}],"hitsAddend":1}`))
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"acme"}],"limit":{"requestsPerUnit":1,"unit":"SECOND"}}],"hits_addend":5}`))
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"a"}],"hitsAddend":"3"}]}`))
	f.Add([]byte(`{"domain":"x","descriptors":[{}]}`))
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"\ud800"}]}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/json", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			var resp rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				t.Fatalf("%d answer is not a RateLimitResponse: %v: %s", rec.Code, err, rec.Body)
			}
			want := rlsv3.RateLimitResponse_OK
			if rec.Code == http.StatusTooManyRequests {
				want = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			if resp.OverallCode != want {
				t.Fatalf("status %d with overall code %v", rec.Code, resp.OverallCode)
			}
		case http.StatusBadRequest:
			if !strings.HasPrefix(rec.Body.String(), "Bad Request") {
				t.Fatalf("400 body %q", rec.Body)
			}
		case http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
