package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/floodgate-dev/floodgate/httplimit"
)

// TestDirectSendsWhatReverseProxySends: for requests with tricky headers,
// the upstream sees the same request line and headers from the direct
// forwarder as from httputil.ReverseProxy, and the client the same
// response headers.
func TestDirectSendsWhatReverseProxySends(t *testing.T) {
	type seen struct {
		uri    string
		header http.Header
	}
	got := make(chan seen, 1)
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.RequestURI, r.Header.Clone()}
		w.Header().Set("Connection", "X-Gone")
		w.Header().Set("X-Gone", "1")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("X-Forwarded-For", "kept-in-responses")
		io.WriteString(w, "ok")
	}))
	proxies, _ := httplimit.ParseProxies("127.0.0.0/8")
	front := map[bool]*httptest.Server{}
	for _, noDirect := range []bool{false, true} {
		gw, err := New(Options{noDirect: noDirect, Proxies: proxies, Routes: []Route{{Prefix: "/", Upstream: mustURL(t, up.URL+"/base?u=1")}}})
		if err != nil {
			t.Fatal(err)
		}
		front[noDirect] = httptest.NewServer(gw)
		defer front[noDirect].Close()
		defer gw.CloseIdleConnections()
	}
	for i, req := range []string{
		"GET /x?q=1 HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET /a/b HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Hop, x-other\r\nX-Hop: 1\r\nX-Other: 2\r\nX-Keep: 3\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-For: 5.6.7.8, 9.9.9.9\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nVia: 1.0 edge\r\nTE: trailers, deflate\r\nUser-Agent: ua\r\nAccept-Encoding: gzip\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nTE: deflate\r\nProxy-Connection: keep-alive\r\nKeep-Alive: 5\r\nProxy-Authorization: x\r\nContent-Length: 0\r\n\r\n",
		"DELETE /item/7 HTTP/1.1\r\nHost: h\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
		"POST /empty HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"GET /old HTTP/1.0\r\nHost: h\r\n\r\n",
	} {
		var views [2]seen
		var resps [2]http.Header
		for j, noDirect := range []bool{false, true} {
			conn, err := net.Dial("tcp", front[noDirect].Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(conn, req)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			resp.Body.Close()
			conn.Close()
			views[j] = <-got
			resps[j] = resp.Header
			delete(resps[j], "Date")
		}
		if !reflect.DeepEqual(views[0], views[1]) {
			t.Errorf("request %d: upstream saw\n direct        %q %v\n ReverseProxy  %q %v", i, views[0].uri, views[0].header, views[1].uri, views[1].header)
		}
		if !reflect.DeepEqual(resps[0], resps[1]) {
			t.Errorf("request %d: client got\n direct        %v\n ReverseProxy  %v", i, resps[0], resps[1])
		}
	}
}

// TestDirectRelaysWhatReverseProxyRelays: chunked responses with
// trailers, HEAD, 304 and a response closed by the upstream reach the
// client the same way through both paths.
func TestDirectRelaysWhatReverseProxyRelays(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailer":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part2")
			w.Header().Set("X-Sum", "42")
		case "/not-modified":
			w.Header().Set("Etag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		default:
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "hello")
		}
	}))
	var clients [2]*http.Client
	var fronts [2]*httptest.Server
	for j, noDirect := range []bool{false, true} {
		gw, err := New(Options{noDirect: noDirect, Routes: []Route{{Prefix: "/", Upstream: mustURL(t, up.URL)}}})
		if err != nil {
			t.Fatal(err)
		}
		fronts[j] = httptest.NewServer(gw)
		defer fronts[j].Close()
		defer gw.CloseIdleConnections()
		clients[j] = fronts[j].Client()
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/trailer"}, {"HEAD", "/plain"}, {"GET", "/not-modified"}, {"GET", "/close"}, {"GET", "/close"}, {"GET", "/plain"},
	} {
		type view struct {
			status  int
			header  http.Header
			trailer http.Header
			body    string
		}
		var views [2]view
		for j := range fronts {
			req, _ := http.NewRequest(c.method, fronts[j].URL+c.path, nil)
			resp, err := clients[j].Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			delete(resp.Header, "Date")
			views[j] = view{resp.StatusCode, resp.Header, resp.Trailer, string(b)}
		}
		if !reflect.DeepEqual(views[0], views[1]) {
			t.Errorf("%s %s: client got\n direct        %+v\n ReverseProxy  %+v", c.method, c.path, views[0], views[1])
		}
	}
}
