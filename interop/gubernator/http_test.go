package gubernator

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestHTTPGateway: POST /v1/GetRateLimits and GET /v1/HealthCheck answer
// as gubernator's gateway does: the same status codes, the same JSON
// (compared parsed: protojson varies its spacing), the same gRPC code in
// error bodies. advertise_address differs (each server's own address), and
// so does local_peers' grpc_address.
func TestHTTPGateway(t *testing.T) {
	p := startPair(t, onMemory)
	do := func(base, method, path, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s %s: %d %q is not JSON", base, method, path, resp.StatusCode, b)
		}
		return resp.StatusCode, m
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","unique_key":"k","hits":1,"limit":2,"duration":60000}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","unique_key":"k","hits":"2","limit":"2","duration":"60000","behavior":"DRAIN_OVER_LIMIT"}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","uniqueKey":"l","hits":1,"limit":3,"duration":1000,"algorithm":"LEAKY_BUCKET","burst":5,"unknown":1}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","unique_key":"m","hits":1,"limit":3,"duration":1000,"algorithm":9}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","unique_key":"g","hits":1,"limit":3,"duration":3,"behavior":4}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"unique_key":"x"},{"name":"x"},{}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"name":"h","unique_key":"w","hits":2,"limit":2,"duration":60000,"algorithm":"LEAKY_BUCKET"},` +
			`{"name":"h","unique_key":"w","hits":1,"limit":2,"duration":60000,"algorithm":"LEAKY_BUCKET","max_wait":"60000"},` +
			`{"name":"h","unique_key":"w","hits":1,"limit":2,"duration":60000,"algorithm":1,"maxWait":1},` +
			`{"name":"h","unique_key":"w","hits":1,"limit":2,"duration":60000,"max_wait":-5}]}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[]}`},
		{"POST", "/v1/GetRateLimits", `{}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[`},
		{"POST", "/v1/GetRateLimits", `{"requests":{"name":"n"}}`},
		{"POST", "/v1/GetRateLimits", `{"requests":[{"hits":"x"}]}`},
		{"GET", "/v1/GetRateLimits", ``},
		{"POST", "/v1/HealthCheck", ``},
		{"GET", "/v1/LiveCheck", ``},
		{"GET", "/v1/HealthCheck", ``},
	} {
		gc, gm := do(p.guberHTTP, c.method, c.path, c.body)
		fc, fm := do(p.floodHTTP, c.method, c.path, c.body)
		if c.path == "/v1/HealthCheck" && gc == 200 {
			for _, m := range []map[string]any{gm, fm} {
				delete(m, "advertise_address")
				if peers, ok := m["local_peers"].([]any); ok { // v2.21.0: the node itself
					for _, p := range peers {
						if p, ok := p.(map[string]any); ok {
							delete(p, "grpc_address")
						}
					}
				}
			}
		}
		if gc != fc {
			t.Errorf("%s %s %s: status %d, gubernator %d (%v)", c.method, c.path, c.body, fc, gc, gm)
			continue
		}
		if gc != 200 { // error bodies: the same code; messages are each decoder's own
			if gm["code"] != fm["code"] {
				t.Errorf("%s %s %s: error code %v, gubernator %v", c.method, c.path, c.body, fm["code"], gm["code"])
			}
			continue
		}
		if !reflect.DeepEqual(gm, fm) {
			t.Errorf("%s %s %s:\n floodgate  %v\n gubernator %v", c.method, c.path, c.body, fm, gm)
		}
	}
}
