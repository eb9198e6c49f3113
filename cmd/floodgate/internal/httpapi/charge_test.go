package httpapi

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

const settleRules = `
domain: ai
rules:
  - name: tokens
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 1000
    window: 1m
  - name: in-flight
    match: {stream: "*"}
    count_by: [stream]
    algorithm: concurrency
    limit: 1
`

func settleServer(t *testing.T) string {
	t.Helper()
	set, err := rules.Parse("rules.yaml", []byte(settleRules))
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{}))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func remaining(m map[string]any) float64 {
	return m["statuses"].([]any)[0].(map[string]any)["remaining"].(float64)
}

func TestPeekAndCharge(t *testing.T) {
	url := settleServer(t)
	tenant := `"descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}]`
	steps := []struct {
		path, body string
		allowed    bool
		remaining  float64
	}{
		{"/v1/check", `{"peek":true,` + tenant + `}`, true, 1000},
		{"/v1/charge", `{"hits":800,` + tenant + `}`, true, 200},
		{"/v1/check", `{"peek":true,` + tenant + `}`, true, 200},
		{"/v1/charge", `{"hits":800,` + tenant + `}`, true, 0},  // counted past the limit
		{"/v1/check", `{"peek":true,` + tenant + `}`, false, 0}, // in debt
		{"/v1/check", `{"hits":1,` + tenant + `}`, false, 0},
	}
	for i, s := range steps {
		code, m := post(t, url+s.path, s.body)
		if code != 200 || m["allowed"] != s.allowed || remaining(m) != s.remaining {
			t.Fatalf("step %d %s %s: %d %v, want allowed %v remaining %v", i, s.path, s.body, code, m, s.allowed, s.remaining)
		}
	}
}

// A slot is given back only by the lease its check returned: a release
// without one is 400, and one with another stream's lease, a made-up lease
// or a lease released already changes nothing and says so.
func TestReleaseOverTheWire(t *testing.T) {
	url := settleServer(t)
	body := `{"descriptors":[{"entries":[{"key":"stream","value":"s1"}]}]}`
	withLease := func(lease string) string {
		return `{"descriptors":[{"entries":[{"key":"stream","value":"s1"}]}],"lease":"` + lease + `"}`
	}
	_, first := post(t, url+"/v1/check", body)
	lease, _ := first["lease"].(string)
	if first["allowed"] != true || lease == "" {
		t.Fatalf("first: %v, want allowed with a lease", first)
	}
	if _, m := post(t, url+"/v1/check", body); m["allowed"] != false {
		t.Fatalf("second while the first holds the slot: %v, want rejected", m)
	}
	if code, m := post(t, url+"/v1/release", body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "lease") {
		t.Fatalf("release without a lease: %d %v, want 400", code, m)
	}
	_, other := post(t, url+"/v1/check", `{"descriptors":[{"entries":[{"key":"stream","value":"s2"}]}]}`)
	for name, l := range map[string]string{"another stream's": other["lease"].(string), "made-up": "0123456789ab0123456789ab"} {
		if code, m := post(t, url+"/v1/release", withLease(l)); code != 200 || m["released"] != false || m["note"] == nil {
			t.Fatalf("release with %s lease: %d %v, want released false with a note", name, code, m)
		}
	}
	if _, m := post(t, url+"/v1/check", body); m["allowed"] != false {
		t.Fatalf("after foreign releases: %v, want still rejected", m)
	}
	if code, m := post(t, url+"/v1/release", withLease(lease)); code != 200 || m["released"] != true {
		t.Fatalf("release: %d %v", code, m)
	}
	if code, m := post(t, url+"/v1/release", withLease(lease)); code != 200 || m["released"] != false {
		t.Fatalf("second release of the same lease: %d %v, want released false", code, m)
	}
	if _, m := post(t, url+"/v1/check", body); m["allowed"] != true {
		t.Fatalf("after release: %v, want allowed", m)
	}
	if _, m := post(t, url+"/v1/check", body); m["allowed"] != false {
		t.Fatalf("the double release freed a second slot: %v", m)
	}
	for _, bad := range []string{`{}`, `{"descriptors":[]}`, `{"x":1}`, `{"descriptors":[{"entries":[{"key":"","value":"a"}]}]}`, `{} {}`} {
		for _, p := range []string{"/v1/release", "/v1/charge"} {
			if code, _ := post(t, url+p, bad); code != 400 {
				t.Errorf("%s %s: %d, want 400", p, bad, code)
			}
		}
	}
	for _, p := range []string{"/v1/check", "/v1/charge"} {
		if code, _ := post(t, url+p, withLease(lease)); code != 400 {
			t.Errorf("%s with a lease: %d, want 400", p, code)
		}
	}
	if code, _ := post(t, url+"/v1/release", withLease("not-a-lease")); code != 400 {
		t.Errorf("release with a malformed lease: %d, want 400", code)
	}
}

// TestOnlyReleaseTakesALease: a lease in the body of /v1/check,
// /v1/charge or /v1/usage is answered 400 naming the lease, and nothing is
// counted.
func TestOnlyReleaseTakesALease(t *testing.T) {
	url := settleServer(t)
	body := `{"descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}],"hits":5,"lease":"0123456789ab0123456789ab"}`
	for _, path := range []string{"/v1/check", "/v1/charge", "/v1/usage"} {
		if code, m := post(t, url+path, body); code != 400 || !strings.Contains(fmt.Sprint(m["error"]), "only /v1/release takes a lease") {
			t.Errorf("%s with a lease: %d %v, want 400 naming the lease", path, code, m)
		}
	}
	if _, m := post(t, url+"/v1/usage", `{"descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`); remaining(m) != 1000 {
		t.Fatalf("after the refused requests: %v, want nothing counted", m)
	}
}
