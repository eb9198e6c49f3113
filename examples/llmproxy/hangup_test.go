package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// waitLimit bounds every wait of the hang-up tests: far beyond what any
// step takes on a loaded machine, so that a proxy that never answers fails
// the test instead of hanging it.
const waitLimit = time.Minute

// gatedModel is a fake OpenAI-compatible API whose answers wait for the
// test: each request, named by its X-Call header, is announced on arrival
// and answered when released (a streamed one sends its first chunk
// before waiting). Like a real model, it spends an answer's tokens once
// asked, whether or not anyone reads the answer, and counts them.
type gatedModel struct {
	input, output int64

	mu       sync.Mutex
	arrived  map[string]chan struct{}
	release  map[string]chan struct{}
	produced int64
}

// chans returns the arrival and release channels of call id.
func (m *gatedModel) chans(id string) (arrived, release chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.arrived == nil {
		m.arrived, m.release = map[string]chan struct{}{}, map[string]chan struct{}{}
	}
	if m.arrived[id] == nil {
		m.arrived[id], m.release[id] = make(chan struct{}), make(chan struct{})
	}
	return m.arrived[id], m.release[id]
}

func (m *gatedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	arrived, release := m.chans(r.Header.Get("X-Call"))
	m.mu.Lock()
	m.produced += m.input + m.output
	m.mu.Unlock()
	close(arrived)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, m.input, m.output, m.input+m.output)
	wait := func() {
		select {
		case <-release:
		case <-time.After(waitLimit):
		}
	}
	if body["stream"] != true {
		wait()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"message":{"content":"hi"}}],"usage":%s}`, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i, word := range []string{"hel", "lo", " there"} {
		if i == 1 {
			wait()
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", word)
		w.(http.Flusher).Flush()
	}
	if opts, _ := body["stream_options"].(map[string]any); opts["include_usage"] == true {
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// chargeCounter is an RLS client that counts the tokens charged to the
// tenants' total budgets (the hits_addend of the tokens=total descriptors
// of the calls that count), and the most answers the proxy had in flight
// (checks that allowed a request, less the charges made), passing every
// call on to the real server.
type chargeCounter struct {
	rlsv3.RateLimitServiceClient
	mu                    sync.Mutex
	charged               int64
	inFlight, maxInFlight int
}

func (c *chargeCounter) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	resp, err := c.RateLimitServiceClient.ShouldRateLimit(ctx, req, opts...)
	if err != nil {
		return resp, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var hits int64
	for _, d := range req.GetDescriptors() {
		hits += int64(d.GetHitsAddend().GetValue())
		for _, e := range d.GetEntries() {
			if e.GetKey() == "tokens" && e.GetValue() == "total" {
				c.charged += int64(d.GetHitsAddend().GetValue())
			}
		}
	}
	switch {
	case hits > 0:
		c.inFlight--
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		c.inFlight++
		c.maxInFlight = max(c.maxInFlight, c.inFlight)
	}
	return resp, nil
}

// watchedProxy serves a proxy and keeps each request's context by its
// X-Call header, so that a test can wait until the proxy has seen a client
// hang up.
type watchedProxy struct {
	proxy http.Handler
	ctxs  sync.Map // X-Call -> context.Context
}

func (p *watchedProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.ctxs.Store(r.Header.Get("X-Call"), r.Context())
	p.proxy.ServeHTTP(w, r)
}

// hangUp sends one request for tenant through the proxy and hangs up
// before the answer: at once when the model has the request (a JSON
// answer), or after the first chunk of a streamed answer. When the proxy
// has seen the client go, it lets the model answer. It returns the status
// the client saw when the proxy answered before the model was asked (a
// 429), else 0.
func hangUp(t *testing.T, proxy string, wp *watchedProxy, m *gatedModel, id string, stream bool) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"model":"m"}`
	if stream {
		body = `{"model":"m","stream":true}`
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", proxy+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("X-Call", id)
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		done <- result{resp, err}
	}()
	arrived, release := m.chans(id)
	defer func() {
		if c, ok := wp.ctxs.Load(id); ok {
			select {
			case <-c.(context.Context).Done():
			case <-time.After(waitLimit):
				t.Errorf("call %s: the proxy did not see the client hang up in %v", id, waitLimit)
			}
		}
		close(release)
	}()
	select {
	case <-arrived:
	case r := <-done:
		if r.err != nil {
			t.Errorf("call %s: %v", id, r.err)
			return 0
		}
		r.resp.Body.Close()
		return r.resp.StatusCode
	case <-time.After(waitLimit):
		t.Errorf("call %s: neither an answer nor a call to the model in %v", id, waitLimit)
		return 0
	}
	if stream {
		r := <-done
		if r.err != nil {
			t.Errorf("call %s: %v", id, r.err)
			return 0
		}
		line, err := bufio.NewReader(r.resp.Body).ReadString('\n')
		if err != nil || !strings.Contains(line, `"hel"`) {
			t.Errorf("call %s: first line of the stream %q, %v", id, line, err)
		}
		cancel()
		r.resp.Body.Close()
		return 0
	}
	cancel()
	if r := <-done; r.err == nil {
		r.resp.Body.Close()
		t.Errorf("call %s: an answer (%d) to a client that hung up before the model answered", id, r.resp.StatusCode)
	}
	return 0
}

// TestProxyChargesClientsThatHangUp: clients that hang up before the
// answer, JSON (before the model answers) and streamed (after the first
// chunk, before the usage chunk), are charged every token the model spent
// on them, and the tenant's budget holds to its documented bound: the
// tokens spent in the window stay within (1+e)·L plus one answer for each
// answer in flight (allowed by a check and not yet charged; a client that
// hangs up and asks again has more than one). Four clients hang up on ten
// requests each, on a 10,000-token budget, answers of 2,000 tokens.
func TestProxyChargesClientsThatHangUp(t *testing.T) {
	const (
		budget    = 10000
		tolerance = 0.1 // bounded-log's default e
		clients   = 4
		requests  = 10
	)
	m := &gatedModel{input: 1000, output: 1000}
	up := httptest.NewServer(m)
	defer up.Close()
	b := startServer(t, totalRules)
	counter := &chargeCounter{RateLimitServiceClient: b.RLS}
	b.RLS = counter
	wp := &watchedProxy{proxy: New(b, up.URL, up.Client(), nil)}
	proxy := httptest.NewServer(wp)

	var wg sync.WaitGroup
	var mu sync.Mutex
	rejected := 0
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests {
				code := hangUp(t, proxy.URL, wp, m, fmt.Sprintf("%d-%d", c, i), i%2 == 1)
				if code == http.StatusTooManyRequests {
					mu.Lock()
					rejected++
					mu.Unlock()
				} else if code != 0 {
					t.Errorf("client %d request %d: %d", c, i, code)
				}
			}
		}()
	}
	wg.Wait()
	proxy.Close() // waits for the proxy's handlers, charges included

	m.mu.Lock()
	produced := m.produced
	m.mu.Unlock()
	counter.mu.Lock()
	charged, inFlight := counter.charged, counter.maxInFlight
	counter.mu.Unlock()
	bound := int64(budget*(1+tolerance)) + int64(inFlight)*(m.input+m.output)
	t.Logf("%d requests from %d clients that hung up: the model spent %d tokens on %d answers (at most %d in flight), %d charged, %d rejected; bound %d",
		clients*requests, clients, produced, produced/(m.input+m.output), inFlight, charged, rejected, bound)
	if charged != produced {
		t.Errorf("charged %d tokens, the model spent %d", charged, produced)
	}
	if produced > bound {
		t.Errorf("the model spent %d tokens on a %d budget, over the bound %d ((1+e)·L and %d answers in flight)", produced, budget, bound, inFlight)
	}
	if rejected == 0 {
		t.Error("no request rejected: the budget was never spent")
	}
}

// goneWriter is a ResponseWriter whose client left after the first write.
type goneWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (w *goneWriter) Write(b []byte) (int, error) {
	if w.writes++; w.writes > 1 {
		return 0, errors.New("write: broken pipe")
	}
	return w.ResponseRecorder.Write(b)
}

// TestRelayReadsToUsageAfterClientLeft: when writing to the client fails
// after the first chunk, relay reads the rest of the model's stream for
// its usage, writes nothing more, and returns the write's error.
func TestRelayReadsToUsageAfterClientLeft(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"c\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5000,\"completion_tokens\":3,\"total_tokens\":5003}}\n\n" +
		"data: [DONE]\n\n"
	w := &goneWriter{ResponseRecorder: httptest.NewRecorder()}
	s, err := relay(w, strings.NewReader(stream), true)
	if err == nil {
		t.Error("relay returned no error for a client that left")
	}
	if !s.Reported || s.Usage != (Usage{Input: 5000, Output: 3, Total: 5003}) {
		t.Fatalf("relay learned %+v, want the usage chunk's 5000+3", s)
	}
	if got := w.Body.String(); got != "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" {
		t.Fatalf("the client got %q after it left", got)
	}
}

// TestStreamCutShortChargesAnEstimate: a stream the model ends without its
// usage chunk is charged an estimate, a token a chunk of output and a
// token per four bytes of the request body for input, rather than nothing.
func TestStreamCutShortChargesAnEstimate(t *testing.T) {
	resp := &http.Response{
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body:   io.NopCloser(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n")),
	}
	req := request{Stream: true, Body: []byte(strings.Repeat("x", 400))}
	u := (&Proxy{}).answer(httptest.NewRecorder(), resp, req, "acme")
	if want := (Usage{Input: 100, Output: 2, Total: 102}); u != want {
		t.Fatalf("a stream cut short is charged %+v, want %+v", u, want)
	}
}
