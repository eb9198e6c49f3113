// Command attackconn is the client side of scripts/attack-connections and
// scripts/attack-grpc: it opens connections that send a POST header
// announcing a large body, one byte of it and then nothing ("silent
// bodies"), and reports when the server closed each; or it attacks a gRPC
// listener with raw HTTP/2 frames: streams opened and reset at once
// ("rapid reset") or streams whose request message never comes ("held
// streams"); or it sends RLS calls that each carry a new limit override
// value ("override flood") and asks victims at their limit again; or it
// tries to free another client's concurrency slot through /v1/release
// ("foreign release"); or it checks /healthz and an RLS call at a fixed
// interval and reports their latencies; or it serves as a gateway upstream
// that reads bodies. The HTTP/2 attacks also make the server reset the
// streams itself ("MadeYouReset": a WINDOW_UPDATE of increment 0 on each),
// over TLS for the HTTPS listener. It prints one JSON object. It is a measuring tool, not part of
// Floodgate.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func main() {
	mode := flag.String("mode", "attack", "attack, check, upstream, rapid-reset, made-you-reset, held-streams, override-flood or foreign-release")
	target := flag.String("target", "", "attack: host:port of the HTTP listener; rapid-reset, made-you-reset, held-streams: of the gRPC listener (or, with -tls, an HTTPS one)")
	path := flag.String("path", "/v1/check", "attack: request path; rapid-reset, made-you-reset with -tls: the streams' path")
	useTLS := flag.Bool("tls", false, "rapid-reset, made-you-reset: connect with TLS (HTTP/2 by ALPN) and send POST -path with a JSON content type")
	n := flag.Int("n", 1000, "attack: connections to open")
	from := flag.String("from", "127.0.0.2", "attack: comma-separated source addresses, used in turn")
	hold := flag.Duration("hold", time.Minute, "attack: how long to wait for the server to close them; check: how long to check")
	httpURL := flag.String("http", "", "check, foreign-release: base URL of the http listener (check: empty for RLS calls only)")
	grpcAddr := flag.String("grpc", "", "check, override-flood: host:port of the gRPC listener")
	every := flag.Duration("every", 100*time.Millisecond, "check: interval (0: one check after another)")
	httpsURL := flag.String("https", "", "check: base URL of an HTTPS listener to ask POST /v1/check on, over one HTTP/2 connection (the certificate not checked)")
	listen := flag.String("listen", "", "upstream: host:port to serve on")
	conns := flag.Int("conns", 4, "rapid-reset, held-streams: connections")
	streams := flag.Int("streams", 1024, "held-streams: streams per connection")
	domain := flag.String("domain", "attack", "override-flood, foreign-release: the rules' domain")
	overrides := flag.Int("overrides", 100000, "override-flood: distinct override values to send")
	workers := flag.Int("workers", 8, "override-flood: concurrent callers")
	victims := flag.Int("victims", 100, "override-flood: victims put at their limit first")
	victimLimit := flag.Int("victim-limit", 5, "override-flood: the rules' limit for client=victim-N")
	job := flag.String("job", "x", "foreign-release: value of the job descriptor a concurrency rule of limit 1 counts")
	flag.Parse()
	var out any
	switch *mode {
	case "attack":
		out = attack(*target, *path, *n, strings.Split(*from, ","), *hold)
	case "rapid-reset", "made-you-reset":
		to := h2Target{addr: *target}
		if *useTLS {
			to = h2Target{addr: *target, tls: true, path: *path, contentType: "application/json"}
		}
		out = rapidReset(to, strings.Split(*from, ","), *conns, *hold, *mode == "made-you-reset")
	case "held-streams":
		out = heldStreams(*target, strings.Split(*from, ","), *conns, *streams, *hold)
	case "check":
		out = check(*httpURL, *grpcAddr, *httpsURL, *every, *hold)
	case "override-flood":
		out = overrideFlood(*grpcAddr, *domain, *overrides, *workers, *victims, *victimLimit)
	case "foreign-release":
		out = foreignRelease(*httpURL, *domain, *job)
	case "upstream":
		http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
		}))
		return
	default:
		fmt.Fprintln(os.Stderr, "unknown -mode", *mode)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

// attackResult describes what the server did with the silent connections.
type attackResult struct {
	Target     string  `json:"target"`
	Opened     int     `json:"opened"`
	DialErrors int     `json:"dial_errors"`
	ClosedFast int     `json:"closed_within_1s"`
	ClosedLate int     `json:"closed_after_1s"`
	StillOpen  int     `json:"still_open_at_hold"`
	P50HeldS   float64 `json:"p50_held_s"`
	P99HeldS   float64 `json:"p99_held_s"`
	MaxHeldS   float64 `json:"max_held_s"`
	OpenS      float64 `json:"seconds_to_open_all"`
}

func attack(target, path string, n int, from []string, hold time.Duration) attackResult {
	res := attackResult{Target: target}
	req := "POST " + path + " HTTP/1.1\r\nHost: attack\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{"
	var mu sync.Mutex
	var held []time.Duration
	var wg sync.WaitGroup
	begin := time.Now()
	for i := 0; i < n; i++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from[i%len(from)])}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", target)
		if err != nil {
			res.DialErrors++
			continue
		}
		res.Opened++
		sent := time.Now()
		if _, err := io.WriteString(c, req); err != nil {
			c.Close()
			mu.Lock()
			held = append(held, 0)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(sent.Add(hold))
			_, err := io.Copy(io.Discard, c)
			mu.Lock()
			defer mu.Unlock()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				res.StillOpen++
				return
			}
			held = append(held, time.Since(sent))
		}()
	}
	res.OpenS = time.Since(begin).Seconds()
	wg.Wait()
	sort.Slice(held, func(i, j int) bool { return held[i] < held[j] })
	for _, h := range held {
		if h < time.Second {
			res.ClosedFast++
		} else {
			res.ClosedLate++
		}
	}
	if len(held) > 0 {
		res.P50HeldS = held[len(held)/2].Seconds()
		res.P99HeldS = held[len(held)*99/100].Seconds()
		res.MaxHeldS = held[len(held)-1].Seconds()
	}
	return res
}

// checkResult holds the latencies of the health, RLS and HTTPS checks.
type checkResult struct {
	Checks     int     `json:"checks"`
	Failures   int     `json:"failures"`
	Slow       int     `json:"over_1s"`
	Seconds    float64 `json:"seconds"`
	HealthP50  float64 `json:"healthz_p50_ms"`
	HealthMax  float64 `json:"healthz_max_ms"`
	RLSP50     float64 `json:"rls_p50_ms"`
	RLSP99     float64 `json:"rls_p99_ms"`
	RLSMax     float64 `json:"rls_max_ms"`
	HTTPSP50   float64 `json:"https_p50_ms"`
	HTTPSP99   float64 `json:"https_p99_ms"`
	HTTPSMax   float64 `json:"https_max_ms"`
	FirstError string  `json:"first_error,omitempty"`
	// Exhausted counts RLS calls answered RESOURCE_EXHAUSTED.
	Exhausted int `json:"rls_resource_exhausted"`
	// SlowAt lists when (seconds after the start) a check failed or took 1 s.
	SlowAt []float64 `json:"slow_or_failed_at_s,omitempty"`
}

// check makes, every interval (back to back if 0) for d, each check asked
// for: GET /healthz on a new connection (httpURL), one RLS call (grpcAddr)
// and POST /v1/check over HTTPS on one HTTP/2 connection (httpsURL).
// Long because the three checks share one loop and one record of what was
// slow or failed, and each reads best where it is made.
func check(httpURL, grpcAddr, httpsURL string, every, d time.Duration) checkResult {
	var res checkResult
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tc := &http.Client{Timeout: time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	var rlsc rlsv3.RateLimitServiceClient
	if grpcAddr != "" {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			res.FirstError = err.Error()
			return res
		}
		defer conn.Close()
		rlsc = rlsv3.NewRateLimitServiceClient(conn)
	}
	req := &rlsv3.RateLimitRequest{Domain: "default", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: "checker"}}}}}
	body := `{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"checker"}]}]}`
	fail := func(err error) {
		res.Failures++
		if res.FirstError == "" {
			res.FirstError = err.Error()
		}
	}
	httpCall := func(c *http.Client, method, url, body string) error {
		r, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(r)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			return fmt.Errorf("%s %s: %s", method, url, resp.Status)
		}
		return nil
	}
	var hl, rl, sl []time.Duration
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	begin := time.Now()
	for end := begin.Add(d); time.Now().Before(end); {
		res.Checks++
		failed := res.Failures
		t0 := time.Now()
		if httpURL != "" {
			if err := httpCall(hc, http.MethodGet, httpURL+"/healthz", ""); err != nil {
				fail(err)
			}
			hl = append(hl, time.Since(t0))
		}
		t1 := time.Now()
		if rlsc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := rlsc.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil {
				fail(fmt.Errorf("RLS: %w", err))
				if status.Code(err) == codes.ResourceExhausted {
					res.Exhausted++
				}
			}
			rl = append(rl, time.Since(t1))
		}
		t2 := time.Now()
		if httpsURL != "" {
			if err := httpCall(tc, http.MethodPost, httpsURL+"/v1/check", body); err != nil {
				fail(err)
			}
			sl = append(sl, time.Since(t2))
		}
		if time.Since(t0) >= time.Second {
			res.Slow++
		}
		if res.Failures > failed || time.Since(t0) >= time.Second {
			res.SlowAt = append(res.SlowAt, float64(t0.Sub(begin).Milliseconds())/1000)
		}
		if tick != nil {
			<-tick
		}
	}
	res.Seconds = time.Since(begin).Seconds()
	res.HealthP50, res.HealthMax = quantiles(hl)
	res.RLSP50, res.RLSMax = quantiles(rl)
	if len(rl) > 0 {
		res.RLSP99 = ms(rl[len(rl)*99/100])
	}
	res.HTTPSP50, res.HTTPSMax = quantiles(sl)
	if len(sl) > 0 {
		res.HTTPSP99 = ms(sl[len(sl)*99/100])
	}
	return res
}

// quantiles sorts ds and returns its median and maximum in milliseconds.
func quantiles(ds []time.Duration) (p50, maxMS float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ms(ds[len(ds)/2]), ms(ds[len(ds)-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
