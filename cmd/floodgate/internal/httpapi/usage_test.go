package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestUsageEndpoint: POST /v1/usage answers each applicable rule's used,
// remaining and limit, counts nothing however often it is called (hits
// ignored), refuses a lease and a wrong method, and reports a charge's
// overspend as used past the limit.
func TestUsageEndpoint(t *testing.T) {
	url := settleServer(t)
	tenant := `"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]`
	usage := func() map[string]any {
		t.Helper()
		code, body := postText(t, url+"/v1/usage", "application/json", `{"hits":500,`+tenant+`}`)
		if code != http.StatusOK {
			t.Fatalf("/v1/usage: %d %s", code, body)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		return m["statuses"].([]any)[0].(map[string]any)
	}
	if code, body := postText(t, url+"/v1/check", "application/json", `{"hits":300,`+tenant+`}`); code != 200 || !strings.Contains(body, `"allowed":true`) {
		t.Fatalf("check: %d %s", code, body)
	}
	for range 3 {
		if s := usage(); s["used"] != 300.0 || s["remaining"] != 700.0 || s["limit"] != 1000.0 || s["rule"] != "tokens" {
			t.Fatalf("usage after 300 of 1000: %v", s)
		}
	}
	if code, body := postText(t, url+"/v1/charge", "application/json", `{"hits":900,`+tenant+`}`); code != 200 {
		t.Fatalf("charge: %d %s", code, body)
	}
	if s := usage(); s["used"] != 1200.0 || s["remaining"] != 0.0 || s["allowed"] != false {
		t.Fatalf("usage after a charge past the limit: %v", s)
	}
	if code, body := postText(t, url+"/v1/usage", "application/json", `{"lease":"x",`+tenant+`}`); code != 400 || !strings.Contains(body, "lease") {
		t.Fatalf("usage with a lease: %d %s", code, body)
	}
	resp, err := http.Get(url + "/v1/usage")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/usage: %d", resp.StatusCode)
	}
}
