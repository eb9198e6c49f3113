package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/loadgen"
)

// TestLoadCommandJSON runs "floodgate load" against a small /v1/check server
// that rejects every third call and reads back the JSON summary.
func TestLoadCommandJSON(t *testing.T) {
	var n atomic.Int64
	var sawDomain atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Domain string `json:"domain"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		sawDomain.Store(req.Domain)
		if n.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, `{"allowed":true}`)
	}))
	defer srv.Close()

	var stdout, stderr bytes.Buffer
	err := dispatch([]string{"load", "--target", srv.URL, "--duration", "300ms", "--concurrency", "2",
		"--keys", "10", "--domain", "shop", "--descriptor", "client=acme", "--json", "--quiet"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("load: %v\n%s", err, stderr.String())
	}
	var s loadgen.Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, stdout.String())
	}
	served := uint64(n.Load())
	if s.Calls != served || s.OverLimit != served/3 || s.Allowed != served-served/3 || s.Errors != 0 {
		t.Errorf("summary %+v; server answered %d calls, every third 429", s, served)
	}
	if sawDomain.Load() != "shop" {
		t.Errorf("domain %v", sawDomain.Load())
	}
	if stderr.Len() != 0 {
		t.Errorf("--quiet still wrote to stderr: %q", stderr.String())
	}

	// The text summary names every figure.
	stdout.Reset()
	if err := dispatch([]string{"load", "--target", srv.URL, "--duration", "100ms", "--quiet"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"calls", "allowed", "over-limit", "errors", "p50", "p99", "p99.9"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestLoadCommandBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"load", "--target", "localhost:1"},
		{"load", "--target", "grpc://127.0.0.1:1", "extra"},
		{"load", "--descriptor", "novalue"},
		{"load", "--keys", "0", "--target", "grpc://127.0.0.1:1"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := dispatch(args, &stdout, &stderr); err == nil {
				t.Errorf("%v: no error", args)
			}
		})
	}
}
