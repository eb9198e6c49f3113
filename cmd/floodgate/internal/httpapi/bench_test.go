package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// BenchmarkCheck measures POST /v1/check without the network: decoding,
// the engine's Check on a memory store, and encoding the answer, plus the
// httptest request and recorder it builds per call. 1,000 clients, two
// rules (one in shadow mode).
func BenchmarkCheck(b *testing.B) {
	set, err := rules.Parse("rules.yaml", []byte(testRules))
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Options{Engine: rules.NewEngine(set, memstore.New(memstore.Options{}))})
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([]string, 1000)
	for i := range bodies {
		bodies[i] = `{"domain":"edge","descriptors":[{"entries":[{"key":"client","value":"c` + strconv.Itoa(i) + `"}]}],"hits":1}`
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/check", strings.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
