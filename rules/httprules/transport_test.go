package httprules

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
)

func upstream(t *testing.T, hits *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "pong")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestTransportFailsWhenLimited(t *testing.T) {
	eng := newEngine(t, `
domain: out
rules:
  - name: dependency
    match: {host: "*"}
    count_by: [host]
    limit: 2
    window: 1h
    algorithm: fixed-window
`)
	var hits atomic.Int32
	srv := upstream(t, &hits)
	client := &http.Client{Transport: &Transport{Checker: eng}}
	for i := 0; i < 2; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
	}
	_, err := client.Get(srv.URL)
	var le *httplimit.LimitError
	if !errors.As(err, &le) || le.Rule != "dependency" || le.RetryAfter <= 0 {
		t.Fatalf("3rd call: err %v, want a *LimitError for rule dependency", err)
	}
	if hits.Load() != 2 {
		t.Fatalf("upstream saw %d calls, want 2: a limited call must not be sent", hits.Load())
	}
}

func TestTransportWaits(t *testing.T) {
	eng := newEngine(t, `
domain: out
rules:
  - name: dependency
    match: {host: "*"}
    count_by: [host]
    limit: 1
    window: 300ms
    algorithm: sliding-log
`)
	var hits atomic.Int32
	srv := upstream(t, &hits)
	client := &http.Client{Transport: &Transport{Checker: eng, Wait: true, MaxWait: 5 * time.Second}}
	start := time.Now()
	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		resp.Body.Close()
	}
	if el := time.Since(start); el < 550*time.Millisecond {
		t.Fatalf("3 calls at 1 per 300ms took %v; they should have waited", el)
	}
	if hits.Load() != 3 {
		t.Fatalf("upstream saw %d calls, want 3", hits.Load())
	}
	// A wait longer than the caller's deadline fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := client.Do(req); err == nil {
		t.Fatal("call with a deadline shorter than the wait succeeded")
	}
}

func TestTransportReleasesOnBodyClose(t *testing.T) {
	eng := newEngine(t, `
domain: out
rules:
  - name: one-call
    match: {host: "*"}
    count_by: [host]
    limit: 1
    algorithm: concurrency
`)
	var hits atomic.Int32
	srv := upstream(t, &hits)
	client := &http.Client{Transport: &Transport{Checker: eng}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Get(srv.URL); err == nil {
		t.Fatal("second call allowed while the first response is open")
	}
	resp.Body.Close()
	resp, err = client.Get(srv.URL)
	if err != nil {
		t.Fatalf("call after Close: %v", err)
	}
	io.ReadAll(resp.Body) // reading to EOF releases too
	resp2, err := client.Get(srv.URL)
	if err != nil {
		t.Fatalf("call after reading to EOF: %v", err)
	}
	resp2.Body.Close()
	resp.Body.Close()
}
