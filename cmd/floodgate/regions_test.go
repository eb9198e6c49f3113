package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/netcut"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// The regions test runs three regions on loopback, each a redis-server and
// two `floodgate serve` processes, whose nodes reach the other regions'
// Redis through links. By default a link is a TCP proxy in the test that a
// cut closes; with FLOODGATE_REGION_PROXY naming a scripts/redis-latency-rig
// binary, each link is that proxy (Toxiproxy in a process) with a one-way
// latency of 40, 80 or 120 ms, and a cut stops the process (SIGSTOP: what
// is sent is neither delivered nor refused). scripts/region-rig runs it so,
// with minute windows.

// regionLink is the network from one region's nodes to another's Redis.
// Both *netcut.Link and *proxyLink are one.
type regionLink interface {
	Addr() string
	Cut()
	Mend()
}

// proxyLink is a redis-latency-rig process.
type proxyLink struct {
	cmd    *exec.Cmd
	listen string
}

func newProxyLink(t *testing.T, bin, upstream string, latency time.Duration) *proxyLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	l := &proxyLink{listen: listen, cmd: exec.Command(bin, "-listen", listen, "-upstream", upstream,
		"-latency", latency.String(), "-jitter", (latency / 20).String())}
	l.cmd.Stderr = os.Stderr
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.cmd.Process.Kill(); l.cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", listen); err == nil {
			c.Close()
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy to %s did not listen on %s", upstream, listen)
		}
	}
}

// Addr is the proxy's listening address.
func (l *proxyLink) Addr() string { return l.listen }

// Cut stops the proxy process: what is sent is neither delivered nor refused.
func (l *proxyLink) Cut() { l.cmd.Process.Signal(syscall.SIGSTOP) }

// Mend lets the proxy process run again.
func (l *proxyLink) Mend() { l.cmd.Process.Signal(syscall.SIGCONT) }

// peekLedger returns what node n counts for key on the ledger rule.
func peekLedger(t *testing.T, n *scaleNode, key string) int64 {
	body := fmt.Sprintf(`{"domain":"scale","descriptors":[{"entries":[{"key":"client","value":%q}]}],"peek":true}`, key)
	resp, err := n.client.Post(n.http+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Statuses []struct {
			Rule      string `json:"rule"`
			Limit     int64  `json:"limit"`
			Remaining int64  `json:"remaining"`
		} `json:"statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	for _, s := range out.Statuses {
		if s.Rule == "ledger" {
			return s.Limit - s.Remaining
		}
	}
	t.Fatalf("no ledger status in the answer for %s", key)
	return 0
}

// mergedCalls is the calls of clients as one client's.
func mergedCalls(key string, clients []*scaleClient) *scaleClient {
	m := &scaleClient{key: key}
	for _, c := range clients {
		m.calls = append(m.calls, c.calls...)
		m.rate += c.rate
	}
	return m
}

// TestRegionsRealProcesses: three regions (a, b, c), each a redis-server
// and two `floodgate serve` nodes in mode delayed, exchange their counts.
// A greedy client sends 30, 60 and 10 requests a second through a, b and
// c against one limit; a steady client sends 80% of its limit spread over
// the six nodes. Region b, the busiest, is cut off from the others for
// one and a half windows.
//
// The busiest window of the greedy client's accepted requests, all regions
// together, stays within (1+e)·L + Σ R_r·(δ + T): δ = 2I + X + d, the time
// an admission takes to reach the other regions' nodes (two sync
// intervals, an exchange interval and the one-way delay), and T = the link
// timeout and a heartbeat period, the time a cut takes to be seen. With no
// cut charge, b alone grants the whole limit during the cut and the other
// two another one: about 2L. After the cut and a few exchanges, every
// region counts every accepted request once (a ledger rule on each key).
func TestRegionsRealProcesses(t *testing.T) {
	bin := floodgateBinary(t)
	window := scaleDuration(t, "FLOODGATE_REGION_WINDOW", 6*time.Second)
	exchange := scaleDuration(t, "FLOODGATE_REGION_EXCHANGE", 100*time.Millisecond)
	interval := scaleDuration(t, "FLOODGATE_REGION_INTERVAL", 100*time.Millisecond)
	period := scaleDuration(t, "FLOODGATE_REGION_PERIOD", 100*time.Millisecond)
	cutFor := scaleDuration(t, "FLOODGATE_REGION_CUT", window*3/2)
	proxy := os.Getenv("FLOODGATE_REGION_PROXY")
	linkTimeout := 3 * exchange
	limit := int(20 * window.Seconds()) // 20 a second
	names := []string{"a", "b", "c"}
	rates := map[string]float64{"a": 30, "b": 60, "c": 10}
	// One-way delays between regions through the proxy.
	delays := map[string]time.Duration{"ab": 40 * time.Millisecond, "ac": 80 * time.Millisecond, "bc": 120 * time.Millisecond}
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	err := os.WriteFile(rules, []byte(fmt.Sprintf(`domain: scale
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: %d
    window: %s
  - name: ledger
    match: {client: "*"}
    count_by: [client]
    algorithm: fixed-window
    limit: 1000000000
    window: 24h
`, limit, window)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	redis := map[string]*redistest.Server{}
	for _, n := range names {
		redis[n] = redistest.Start(t)
	}
	// links[from+to]: from's nodes to to's Redis.
	links := map[string]regionLink{}
	maxDelay := time.Duration(0)
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			if proxy == "" {
				links[from+to] = netcut.New(t, redis[to].Addr())
				continue
			}
			d := delays[min(from, to)+max(from, to)]
			maxDelay = max(maxDelay, d)
			links[from+to] = newProxyLink(t, proxy, redis[to].Addr(), d)
		}
	}
	fleets := map[string]*scaleFleet{}
	for _, n := range names {
		var others strings.Builder
		for _, o := range names {
			if o != n {
				fmt.Fprintf(&others, "      - {name: %s, store: {type: redis, addrs: [%s]}}\n", o, links[n+o].Addr())
			}
		}
		config := fmt.Sprintf(`http: {addr: "127.0.0.1:0"}
grpc: {addr: "off"}
rules: %s
store: {type: redis, addrs: [%s], prefix: fgregions}
arrangement:
  mode: delayed
  interval: %s
  membership: {period: %s, expiry: %s}
  region:
    name: %s
    exchange: %s
    link_timeout: %s
    others:
%slog: {level: info}
`, rules, redis[n].Addr(), interval, period, 3*period, n, exchange, linkTimeout, others.String())
		fleets[n] = &scaleFleet{t: t, bin: bin, dir: dir, config: config}
		defer fleets[n].kill()
		fleets[n].add(2)
	}
	time.Sleep(linkTimeout + 3*period) // every link has carried counts

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var greedy, steady []*scaleClient
	for _, n := range names {
		g := &scaleClient{key: "greedy", rate: rates[n]}
		s := &scaleClient{key: "steady", rate: 0.8 * float64(limit) / window.Seconds() / 3}
		greedy, steady = append(greedy, g), append(steady, s)
		wg.Add(2)
		go g.run(ctx, fleets[n], &wg)
		go s.run(ctx, fleets[n], &wg)
	}
	allowed := func(cs []*scaleClient) int64 {
		n := 0
		for _, c := range cs {
			n += c.allowedSoFar()
		}
		return int64(n)
	}
	counts := func(key string) map[string]int64 {
		m := map[string]int64{}
		for _, n := range names {
			m[n] = peekLedger(t, fleets[n].live()[0], key)
		}
		return m
	}
	time.Sleep(window)
	beforeAllowed, before := allowed(greedy), counts("greedy")
	cutFrom := time.Now()
	for _, o := range []string{"a", "c"} {
		links["b"+o].Cut()
		links[o+"b"].Cut()
	}
	time.Sleep(cutFor)
	atMend, countsAtMend := allowed(greedy), counts("greedy")
	for _, l := range links {
		l.Mend()
	}
	cutTo := time.Now()
	time.Sleep(window)
	cancel()
	wg.Wait()
	for _, c := range append(greedy, steady...) {
		if c.err != nil {
			t.Fatalf("%s client: %v", c.key, c.err)
		}
	}
	// Every count reaches every region: wait for the exchanges (a
	// generous deadline; the check itself is exact).
	var after map[string]int64
	for _, key := range []string{"greedy", "steady"} {
		want := allowed(map[string][]*scaleClient{"greedy": greedy, "steady": steady}[key])
		var got map[string]int64
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(exchange) {
			got = counts(key)
			if (got["a"] == want && got["b"] == want && got["c"] == want) || time.Now().After(deadline) {
				break
			}
		}
		for _, n := range names {
			if got[n] != want {
				t.Errorf("region %s counts %d accepted requests of %s, %d were accepted in all", n, got[n], key, want)
			}
		}
		if key == "greedy" {
			after = got
		}
	}

	g, s := mergedCalls("greedy", greedy), mergedCalls("steady", steady)
	sure, may := g.busiest(window)
	delta := 2*interval + exchange + maxDelay
	find := linkTimeout + period
	bound := int(1.05*float64(limit) + g.rate*(delta+find).Seconds())
	var steadyBefore, steadyDuring, steadyAfter int
	for _, c := range s.calls {
		switch {
		case c.allowed:
		case c.sent.Before(cutFrom):
			steadyBefore++
		case c.sent.Before(cutTo.Add(find + delta)):
			steadyDuring++
		default:
			steadyAfter++
		}
	}
	t.Logf("limit %d per %v, exchange %v, sync %v, heartbeat %v, link timeout %v, delays %v; b cut off for %v",
		limit, window, exchange, interval, period, linkTimeout, map[bool]any{true: delays, false: "none"}[proxy != ""], cutFor)
	t.Logf("greedy 30/60/10 per s: busiest window %d to %d (bound %d = 1.05 L + %.0f/s x %v); counts before the cut %v (%d accepted), at its end %v (%d accepted), after %v (%d accepted)",
		sure, may, bound, g.rate, delta+find, before, beforeAllowed, countsAtMend, atMend, after, allowed(greedy))
	t.Logf("steady %.1f/s (80%% of its limit): %d calls, rejected %d before the cut, %d during it (and %v after it), %d after",
		s.rate, len(s.calls), steadyBefore, steadyDuring, find+delta, steadyAfter)
	if sure > bound {
		t.Errorf("greedy client: %d accepted within one window across regions, above %d", sure, bound)
	}
}
