package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const pricedRules = `
domain: llm
prices:
  unit: USD cent
  models:
    big: {input: 250, output: 1000}
rules:
  - name: spend
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    calendar: {period: month}
    cost: {usage: money}
    charge_after_response: true
`

// TestUsageCharged: /v1/charge with "usage" counts what the tokens cost at
// the rule file's prices, rounded up; /v1/check and /v1/usage take the
// same field; an unknown model or a negative count is 400 and counts
// nothing.
func TestUsageCharged(t *testing.T) {
	set, err := rules.Parse("rules.yaml", []byte(pricedRules))
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{}))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	tenant := `"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]`
	// 10,001 input tokens at 250 per million (2.50025) and 3,000 output at 1,000 (3): 5.50025, rounded up to 6.
	if code, body := postText(t, srv.URL+"/v1/charge", "application/json",
		`{`+tenant+`,"usage":{"model":"big","input_tokens":10001,"output_tokens":3000}}`); code != 200 || !strings.Contains(body, `"used":6,`) {
		t.Fatalf("charge: %d %s", code, body)
	}
	for _, bad := range []string{`"usage":{"model":"small","input_tokens":5}`, `"usage":{"model":"big","input_tokens":-5}`, `"usage":{"model":"big","tokens":5}`} {
		for _, path := range []string{"/v1/charge", "/v1/check"} {
			if code, body := postText(t, srv.URL+path, "application/json", `{`+tenant+`,`+bad+`}`); code != http.StatusBadRequest {
				t.Errorf("%s %s: %d %s, want 400", path, bad, code, body)
			}
		}
	}
	if code, body := postText(t, srv.URL+"/v1/usage", "application/json", `{`+tenant+`}`); code != 200 || !strings.Contains(body, `"used":6,`) ||
		!strings.Contains(body, `"remaining":94`) {
		t.Fatalf("usage after refused charges: %d %s", code, body)
	}
}
