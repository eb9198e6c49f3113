// Command compare-leases measures quota leases against per-request RLS calls
// side by side in one run: one `floodgate serve` (memory store, or Redis
// with -redis), N client processes (this program again, with -child) sharing
// its limits through rlsclient, in three phases:
//
//  1. rls: each process decides as fast as it can with one RLS call per
//     request (rlsclient without leases), on a key far from its limit;
//  2. leases: the same with Options.Leases: decisions per second per
//     process, and server calls (RLS and Lease) per decision;
//  3. near: paced, skewed traffic (process i sends a share proportional to
//     2^-i, at least 1/4N) on two keys of one rule, one offered twice its
//     limit and one 90% of it, for a few windows; every allowed request's
//     time and every rejection is written down, and the parent merges them:
//     the busiest window of the over key against the rule's bound (L + m),
//     and the under key's rejections (a key under its limit: each is a false
//     reject) against the stated bound.
//
// It prints one table and the load average. Not part of the test suite;
// docs/integrations.md quotes a run.
//
//	go build -o /tmp/floodgate ./cmd/floodgate
//	go run ./scripts/compare-leases -floodgate /tmp/floodgate
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/rlsclient"
)

// The rules: far's limit is far above what the run offers; near's keys are
// paced around theirs.
const (
	nearLimit  = 9000
	nearWindow = 30 * time.Second
	nearBound  = nearLimit + nearLimit/20 // bounded-log, e = 0.05: L + floor(e*L)
	rulesYAML  = `domain: bench
rules:
  - name: far
    match: {far: "*"}
    count_by: [far]
    limit: 4000000000
    window: 1m
    leases: true
  - name: near
    match: {near: "*"}
    count_by: [near]
    limit: 9000
    window: 30s
    leases: true
`
)

type options struct {
	binary, redis       string
	procs, workers      int
	fast, near          time.Duration
	child, phase        string
	index               int
	overRate, underRate float64
	horizon             time.Duration
}

// result is what a child reports for its phase.
type result struct {
	Decisions int64   `json:"decisions"`
	Calls     int64   `json:"calls"`
	Seconds   float64 `json:"seconds"`
	Over      []int64 `json:"over,omitempty"`  // allowed times of the over key (Unix ns)
	Under     []int64 `json:"under,omitempty"` // allowed times of the under key
	Rejects   []int64 `json:"rejects,omitempty"`
}

func main() {
	var o options
	flag.StringVar(&o.binary, "floodgate", "", "the floodgate binary to start (go build -o /tmp/floodgate ./cmd/floodgate)")
	flag.StringVar(&o.redis, "redis", "", "a Redis address (host:port) for the server's store; empty: the memory store")
	flag.IntVar(&o.procs, "procs", 8, "client processes")
	flag.IntVar(&o.workers, "workers", 4, "goroutines per client process in the fast phases")
	flag.DurationVar(&o.fast, "fast", 8*time.Second, "length of each fast phase")
	flag.DurationVar(&o.near, "near", 75*time.Second, "length of the near phase")
	flag.DurationVar(&o.horizon, "horizon", time.Second, "LeaseOptions.Horizon")
	flag.StringVar(&o.child, "child", "", "internal: run as a client process with this server address")
	flag.StringVar(&o.phase, "phase", "", "internal: the phase a child runs")
	flag.IntVar(&o.index, "index", 0, "internal: the child's index")
	flag.Float64Var(&o.overRate, "over-rate", 0, "internal: the child's requests per second on the over key")
	flag.Float64Var(&o.underRate, "under-rate", 0, "internal: the child's requests per second on the under key")
	flag.Parse()
	if o.child != "" {
		if err := runChild(o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if o.binary == "" {
		fmt.Fprintln(os.Stderr, "compare-leases: -floodgate is required")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "compare-leases:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "compare-leases")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, grpcAddr, err := startServer(o, dir)
	if err != nil {
		return err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	rls, err := phase(o, grpcAddr, "rls", nil)
	if err != nil {
		return err
	}
	leases, err := phase(o, grpcAddr, "leases", nil)
	if err != nil {
		return err
	}
	// Skewed shares of the near keys' traffic: 2^-i, at least 1/(4N).
	w := make([]float64, o.procs)
	sum := 0.0
	for i := range w {
		w[i] = max(1/float64(int(1)<<i), 1/(4*float64(o.procs)))
		sum += w[i]
	}
	perSec := float64(nearLimit) / nearWindow.Seconds()
	near, err := phase(o, grpcAddr, "near", func(i int) []string {
		return []string{fmt.Sprintf("-over-rate=%g", 2*perSec*w[i]/sum), fmt.Sprintf("-under-rate=%g", 0.9*perSec*w[i]/sum)}
	})
	if err != nil {
		return err
	}
	report(o, rls, leases, near)
	return nil
}

// phase runs one phase in o.procs child processes at once and returns
// their results.
func phase(o options, addr, name string, extra func(i int) []string) ([]result, error) {
	out := make([]result, o.procs)
	errs := make([]error, o.procs)
	var wg sync.WaitGroup
	for i := range o.procs {
		args := []string{"-child", addr, "-phase", name, fmt.Sprintf("-index=%d", i), fmt.Sprintf("-workers=%d", o.workers),
			fmt.Sprintf("-fast=%v", o.fast), fmt.Sprintf("-near=%v", o.near), fmt.Sprintf("-horizon=%v", o.horizon)}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Stderr = os.Stderr
		wg.Go(func() {
			b, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("%s child %d: %v", name, i, err)
				return
			}
			errs[i] = json.Unmarshal(b, &out[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func runChild(o options) error {
	opts := rlsclient.Options{Domain: "bench", Timeout: 2 * time.Second, Describe: func(key string) rlsclient.Descriptor {
		if key == "far" {
			return rlsclient.Descriptor{{Key: "far", Value: "k"}}
		}
		return rlsclient.Descriptor{{Key: "near", Value: key}}
	}}
	if o.phase != "rls" {
		opts.Leases = &rlsclient.LeaseOptions{Horizon: o.horizon}
	}
	c, err := rlsclient.New(o.child, opts)
	if err != nil {
		return err
	}
	var res result
	switch o.phase {
	case "rls", "leases":
		res, err = fast(c, o)
	default:
		res, err = nearPhase(c, o)
	}
	c.Close()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// fast decides as fast as o.workers goroutines can on the far key.
func fast(c *rlsclient.Client, o options) (result, error) {
	var n atomic.Int64
	var failed atomic.Value
	start := time.Now()
	end := start.Add(o.fast)
	var wg sync.WaitGroup
	for range o.workers {
		wg.Go(func() {
			ctx := context.Background()
			for time.Now().Before(end) {
				for range 64 {
					d, err := c.Allow(ctx, "far")
					if err != nil || !d.Allowed {
						failed.Store(fmt.Sprintf("far key: %+v %v", d, err))
						return
					}
				}
				n.Add(64)
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		return result{}, fmt.Errorf("%s", f)
	}
	return result{Decisions: n.Load(), Calls: c.Calls(), Seconds: time.Since(start).Seconds()}, nil
}

// nearPhase sends paced requests to the over and under keys.
func nearPhase(c *rlsclient.Client, o options) (result, error) {
	var res result
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(o.near)
	pace := func(key string, rate float64, allowed *[]int64, rejects *[]int64) {
		if rate <= 0 {
			return
		}
		iv := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		ctx := context.Background()
		for next.Before(end) {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(iv)
			d, err := c.Allow(ctx, key)
			now := time.Now().UnixNano()
			if err != nil {
				continue
			}
			mu.Lock()
			res.Decisions++
			if d.Allowed {
				*allowed = append(*allowed, now)
			} else if rejects != nil {
				*rejects = append(*rejects, now)
			}
			mu.Unlock()
		}
	}
	wg.Go(func() { pace("over", o.overRate, &res.Over, nil) })
	wg.Go(func() { pace("under", o.underRate, &res.Under, &res.Rejects) })
	wg.Wait()
	res.Calls, res.Seconds = c.Calls(), time.Since(start).Seconds()
	return res, nil
}

// busiest returns the most times inside any window-long interval (t-W, t].
func busiest(ts []int64, window time.Duration) int {
	peak := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for ts[i]-ts[j] >= int64(window) {
			j++
		}
		peak = max(peak, i-j+1)
	}
	return peak
}

func report(o options, rls, leases, near []result) {
	store := "memory"
	if o.redis != "" {
		store = "redis " + o.redis
	}
	fmt.Printf("compare-leases: %d client processes x %d goroutines, one floodgate serve (%s store), load average %s\n\n",
		o.procs, o.workers, store, loadavg())
	fmt.Println("| client | RLS calls/s | lease decisions/s | ratio | server calls per decision (leases) |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	var rt, lt, lc, ld float64
	for i := range rls {
		r := float64(rls[i].Decisions) / rls[i].Seconds
		l := float64(leases[i].Decisions) / leases[i].Seconds
		rt, lt = rt+r, lt+l
		lc, ld = lc+float64(leases[i].Calls), ld+float64(leases[i].Decisions)
		fmt.Printf("| %d | %.0f | %.0f | %.0fx | %.6f |\n", i, r, l, l/r, float64(leases[i].Calls)/float64(leases[i].Decisions))
	}
	fmt.Printf("| all | %.0f | %.0f | %.0fx | %.6f |\n\n", rt, lt, lt/rt, lc/ld)

	var over, under, rejects []int64
	var calls, decisions int64
	for _, r := range near {
		over = append(over, r.Over...)
		under = append(under, r.Under...)
		rejects = append(rejects, r.Rejects...)
		calls += r.Calls
		decisions += r.Decisions
	}
	slices.Sort(over)
	slices.Sort(under)
	fmt.Printf("near phase (%v, rule %d per %v, bounded-log e=0.05: bound %d in any window):\n", o.near, nearLimit, nearWindow, nearBound)
	fmt.Printf("  over key (offered 2x): %d allowed, busiest window %d (bound %d)\n", len(over), busiest(over, nearWindow), nearBound)
	fmt.Printf("  under key (offered 0.9x, never over its limit): %d allowed, %d rejected (busiest window %d)\n",
		len(under), len(rejects), busiest(under, nearWindow))
	fmt.Printf("  server calls per decision in the near phase: %.4f\n", float64(calls)/float64(decisions))
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startServer writes the rules and a config and starts the server.
func startServer(o options, dir string) (*exec.Cmd, string, error) {
	httpAddr, err := freePort()
	if err != nil {
		return nil, "", err
	}
	grpcAddr, err := freePort()
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rulesYAML), 0o600); err != nil {
		return nil, "", err
	}
	cfg := fmt.Sprintf("http: {addr: %q}\ngrpc: {addr: %q}\nlog: {level: warn}\nrules: rules.yaml\n", httpAddr, grpcAddr)
	if o.redis != "" {
		cfg += fmt.Sprintf("store: {type: redis, addrs: [%q]}\narrangement: {mode: centralized}\n", o.redis)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(o.binary, "serve", "--config", path)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	for range 100 {
		if r, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			r.Body.Close()
			return cmd, grpcAddr, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, "", fmt.Errorf("server did not answer /healthz")
}
