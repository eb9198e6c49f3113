package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPlainHeaderLoad: with KeyHeader, calls are GETs to the URL as given,
// spread over the keys in the header; 429 counts as over limit.
func TestPlainHeaderLoad(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("X-Api-Key")
		if r.Method != "GET" || r.URL.Path != "/api/x" || !strings.HasPrefix(k, "key-") {
			http.Error(w, "bad", 400)
			return
		}
		mu.Lock()
		seen[k]++
		n := seen[k]
		mu.Unlock()
		if n > 3 {
			w.WriteHeader(429)
			return
		}
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	s, err := Run(context.Background(), Config{Target: srv.URL + "/api/x", KeyHeader: "x-api-key", Keys: 5,
		Concurrency: 4, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s.Errors != 0 || s.Allowed != 15 || s.OverLimit != s.Calls-15 || len(seen) != 5 {
		t.Fatalf("summary %+v, keys seen %v", s, seen)
	}
}
