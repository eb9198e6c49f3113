// Command gwbench holds the servers scripts/bench-gateway measures against:
//
//	gwbench upstream ADDR   a Go upstream answering every request 200 "ok";
//	                        GET /_accepted answers the number of TCP
//	                        connections it has accepted
//	gwbench nothing ADDR    a do-nothing JSON API: POST /v1/check decodes the
//	                        request and encodes an "allowed" answer of the
//	                        same shape as `floodgate serve`'s, deciding
//	                        nothing (the ceiling of net/http plus JSON here)
//	gwbench proxy ADDR URL  a minimal reverse proxy to URL on net/http with a
//	                        tuned transport and no rate limiting
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: gwbench upstream|nothing ADDR | gwbench proxy ADDR URL")
		os.Exit(2)
	}
	var h http.Handler
	var accepted atomic.Int64
	switch os.Args[1] {
	case "upstream":
		h = upstream(&accepted)
	case "nothing":
		h = http.HandlerFunc(nothing)
	case "proxy":
		if len(os.Args) < 4 {
			log.Fatal("gwbench proxy ADDR URL")
		}
		u, err := url.Parse(os.Args[3])
		if err != nil {
			log.Fatal(err)
		}
		h = proxy(u)
	default:
		log.Fatalf("gwbench: unknown command %q", os.Args[1])
	}
	srv := &http.Server{Addr: os.Args[2], Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				accepted.Add(1)
			}
		}}
	log.Fatal(srv.ListenAndServe())
}

func upstream(accepted *atomic.Int64) http.Handler {
	ok := []byte("ok")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_accepted" {
			io.WriteString(w, strconv.FormatInt(accepted.Load(), 10))
			return
		}
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Write(ok)
	})
}

// checkRequest, checkResponse and status are the JSON API's /v1/check
// body and answer (docs/serving.md), the fields nothing reads and writes.
type checkRequest struct {
	Domain      string `json:"domain"`
	Descriptors []struct {
		Entries []struct {
			Key   string `json:"key"`
			Value string `json:"value"`
		} `json:"entries"`
	} `json:"descriptors"`
}

type checkResponse struct {
	Allowed    bool     `json:"allowed"`
	Code       string   `json:"code"`
	Rejected   []string `json:"rejected"`
	Unlimited  bool     `json:"unlimited"`
	RetryAfter int64    `json:"retry_after"`
	Statuses   []status `json:"statuses"`
}

type status struct {
	Rule          string  `json:"rule"`
	Descriptor    int     `json:"descriptor"`
	Key           string  `json:"key"`
	Limit         int64   `json:"limit"`
	Window        string  `json:"window"`
	WindowSeconds float64 `json:"window_seconds"`
	Algorithm     string  `json:"algorithm"`
	Shadow        bool    `json:"shadow"`
	Unlimited     bool    `json:"unlimited"`
	Allowed       bool    `json:"allowed"`
	Remaining     int64   `json:"remaining"`
	ResetAfterMS  int64   `json:"reset_after_ms"`
	RetryAfterMS  int64   `json:"retry_after_ms"`
	DelayMS       int64   `json:"delay_ms"`
}

// nothing does the JSON API's JSON work without deciding: decode, one
// status per descriptor, encode.
func nothing(w http.ResponseWriter, r *http.Request) {
	var req checkRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := checkResponse{Allowed: true, Code: "OK", Rejected: []string{}}
	for i, d := range req.Descriptors {
		key := ""
		for _, e := range d.Entries {
			key += e.Key + "=" + e.Value
		}
		resp.Statuses = append(resp.Statuses, status{Rule: "per-client", Descriptor: i, Key: key, Limit: 1e9,
			Window: "1m0s", WindowSeconds: 60, Algorithm: "gcra", Allowed: true, Remaining: 1e9 - 1, ResetAfterMS: 1})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// proxy is the smallest reverse proxy worth comparing with: the standard
// library's, a transport that keeps enough idle connections, pooled
// buffers, no rate limiting.
func proxy(u *url.URL) http.Handler {
	var pool sync.Pool
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.SetXForwarded() },
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second,
			DisableCompression: true},
		BufferPool: bufPool{&pool},
	}
}

type bufPool struct{ p *sync.Pool }

func (b bufPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b bufPool) Put(buf []byte) { b.p.Put(&buf) }
