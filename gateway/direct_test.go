package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func getKey(t *testing.T, ctx context.Context, url, key string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), nil
}

// TestDirectRetriesConnectionClosedWhileIdle: the upstream closes idle
// connections after 50 ms; a GET sent once it has closed the pooled
// connection is retried on a fresh one instead of failing.
func TestDirectRetriesConnectionClosedWhileIdle(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.RequestURI())
	}))
	up.Config.IdleTimeout = 50 * time.Millisecond
	closed := make(chan struct{}, 3)
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default: // more closes than requests: the count below says so
			}
		}
	}
	up.Start()
	defer up.Close()
	gw := limited(t, up.URL+"/base", 1<<30, Transport{})
	front := httptest.NewServer(gw)
	defer front.Close()
	for i := range 3 {
		resp, body, err := getKey(t, context.Background(), front.URL+"/x?q=1", "idle")
		if err != nil || resp.StatusCode != 200 || body != "/base/x?q=1" {
			t.Fatalf("request %d: %v %v %q", i, resp, err, body)
		}
		select { // the upstream closes the idle connection, however late
		case <-closed:
		case <-time.After(30 * time.Second):
			t.Fatalf("request %d: the upstream did not close its idle connection in 30 s", i)
		}
	}
	if st := gw.Upstreams()[0]; st.Opened != 3 {
		t.Errorf("opened %d connections, want 3 (each closed by the upstream while idle)", st.Opened)
	}
}

// TestDirectClientGoneClosesUpstreamConnection: a client that gives up
// while the upstream is still working frees the gateway's upstream
// connection (closed, not reused with a response still due on it).
func TestDirectClientGoneClosesUpstreamConnection(t *testing.T) {
	release := make(chan struct{})
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	gw := limited(t, up.URL, 1<<30, Transport{})
	front := httptest.NewServer(gw)
	defer front.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := getKey(t, ctx, front.URL+"/slow", "gone"); err == nil {
		t.Fatal("request answered although the upstream never did")
	}
	deadline := time.Now().Add(5 * time.Second)
	for gw.Upstreams()[0].Open != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("upstream connection still open after the client left: %+v", gw.Upstreams()[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDirectResponseHeaderTimeout: an upstream slower than the route's
// response header timeout gets 502, in about the timeout.
func TestDirectResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	front := httptest.NewServer(limited(t, up.URL, 1<<30, Transport{ResponseHeaderTimeout: 100 * time.Millisecond}))
	defer front.Close()
	start := time.Now()
	resp, _, err := getKey(t, context.Background(), front.URL+"/slow", "slow")
	if err != nil || resp.StatusCode != http.StatusBadGateway || time.Since(start) > 3*time.Second {
		t.Fatalf("slow upstream: %v %v after %v, want 502 after about 100ms", resp, err, time.Since(start))
	}
}

// TestDirectHeadAndNoContent: responses without a body (HEAD, 204) end
// cleanly and leave the connection reusable.
func TestDirectHeadAndNoContent(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/none" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	}))
	gw := limited(t, up.URL, 1<<30, Transport{})
	front := httptest.NewServer(gw)
	defer front.Close()
	for range 3 {
		req, _ := http.NewRequest("HEAD", front.URL+"/x", nil)
		req.Header.Set("X-Api-Key", "head")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 || resp.ContentLength != 5 {
			t.Fatalf("HEAD: %v %v", resp, err)
		}
		resp.Body.Close()
		resp, body, err := getKey(t, context.Background(), front.URL+"/none", "none")
		if err != nil || resp.StatusCode != http.StatusNoContent || body != "" {
			t.Fatalf("204: %v %v %q", resp, err, body)
		}
	}
	if st := gw.Upstreams()[0]; st.Opened != 1 {
		t.Errorf("opened %d upstream connections for sequential requests, want 1", st.Opened)
	}
}

// TestDirectBoundsResponseHeaders: an upstream sending endless headers
// gets 502, not the gateway's memory.
func TestDirectBoundsResponseHeaders(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, _ := http.NewResponseController(w).Hijack()
		defer conn.Close()
		brw.WriteString("HTTP/1.1 200 OK\r\n")
		for range 40000 {
			if _, err := brw.WriteString("X-Filler: 0123456789012345678901234567890123456789\r\n"); err != nil {
				return
			}
		}
		brw.Flush()
	}))
	front := httptest.NewServer(limited(t, up.URL, 1<<30, Transport{}))
	defer front.Close()
	resp, _, err := getKey(t, context.Background(), front.URL+"/big", "big")
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("endless headers: %v %v, want 502", resp, err)
	}
}
