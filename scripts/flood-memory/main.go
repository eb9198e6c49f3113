// Command flood-memory floods a running `floodgate serve` with distinct
// keys through its Envoy RLS API and reports what the memory store's bounds
// cost and keep: the server's RSS over time, how many requests of clients
// already at their limit got through (the answer must be 0), and how many
// requests of fresh light clients were rejected.
//
// It starts the server itself, from the binary given with -floodgate, with
// a config bounding the store (-max-bytes) and either the built-in rules
// (-rules default) or a rule of 5 requests per hour per client (-rules
// victims, the default). It is not part of the default test run; see
// docs/operations.md for a recorded run and scripts/flood-memory/run.
//
//	go build -o /tmp/floodgate ./cmd/floodgate
//	go run ./scripts/flood-memory -floodgate /tmp/floodgate -keys 10000000
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const victimRules = `domain: flood
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: 5
    window: 1h
`

type options struct {
	binary   string
	rules    string
	keys     int
	perCall  int
	workers  int
	victims  int
	light    int
	maxBytes int64
	maxKeys  int
	checks   int
	// attachHTTP, attachGRPC and attachPID name a server already running
	// (in a container, say) to flood instead of starting one; it must
	// serve the victims rules.
	attachHTTP, attachGRPC string
	attachPID              int
}

func main() {
	var o options
	flag.StringVar(&o.binary, "floodgate", "floodgate", "the floodgate binary to run")
	flag.StringVar(&o.rules, "rules", "victims", "victims (5 per hour per client) or default (the built-in rules)")
	flag.IntVar(&o.keys, "keys", 10_000_000, "distinct flood keys to send")
	flag.IntVar(&o.perCall, "per-call", 64, "descriptors per RLS call")
	flag.IntVar(&o.workers, "workers", 4, "concurrent flood callers")
	flag.IntVar(&o.victims, "victims", 700, "clients put at their limit before the flood")
	flag.IntVar(&o.light, "light", 100, "fresh light clients probed at each check, each sending its whole limit")
	flag.Int64Var(&o.maxBytes, "max-bytes", 256<<20, "store.max_bytes (0: the server's default)")
	flag.IntVar(&o.maxKeys, "max-keys", 0, "store.max_keys (0: the server's default)")
	flag.IntVar(&o.checks, "checks", 10, "checks (victims, light clients, RSS) during the flood")
	flag.StringVar(&o.attachHTTP, "attach-http", "", "flood the server already serving HTTP here (host:port) instead of starting one")
	flag.StringVar(&o.attachGRPC, "attach-grpc", "", "its gRPC address (host:port), with -attach-http")
	flag.IntVar(&o.attachPID, "attach-pid", 0, "its process id as this host sees it, for RSS, with -attach-http")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "flood-memory:", err)
		os.Exit(1)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer writes a config and starts the server, returning its process
// and its HTTP and gRPC addresses.
func startServer(o options, dir string) (*exec.Cmd, string, string, error) {
	hp, err := freePort()
	if err != nil {
		return nil, "", "", err
	}
	gp, err := freePort()
	if err != nil {
		return nil, "", "", err
	}
	httpAddr, grpcAddr := fmt.Sprintf("127.0.0.1:%d", hp), fmt.Sprintf("127.0.0.1:%d", gp)
	cfg := fmt.Sprintf("http: {addr: %q}\ngrpc: {addr: %q}\nlog: {level: warn}\n", httpAddr, grpcAddr)
	if o.rules == "victims" {
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(victimRules), 0o600); err != nil {
			return nil, "", "", err
		}
		cfg += "rules: rules.yaml\n"
	}
	if o.maxBytes > 0 || o.maxKeys > 0 {
		cfg += "store:\n"
		if o.maxBytes > 0 {
			cfg += fmt.Sprintf("  max_bytes: %d\n", o.maxBytes)
		}
		if o.maxKeys > 0 {
			cfg += fmt.Sprintf("  max_keys: %d\n", o.maxKeys)
		}
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", "", err
	}
	cmd := exec.Command(o.binary, "serve", "--config", path)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", "", err
	}
	for range 100 {
		if r, err := http.Get("http://" + httpAddr + "/healthz"); err == nil {
			r.Body.Close()
			return cmd, httpAddr, grpcAddr, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd.Process.Kill()
	return nil, "", "", fmt.Errorf("server did not answer /healthz")
}

// rssMB returns the resident set size of process pid in MiB.
func rssMB(pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// metric returns the value of an unlabelled metric from /metrics.
func metric(httpAddr, name string) float64 {
	r, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

// domain is the rule set's domain: flood for the victims rules, default
// for the built-in ones.
var domain = "flood"

func request(entries ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, v := range entries {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: v}},
		})
	}
	return req
}

// allowed sends one request for client and reports whether it was allowed.
func allowed(ctx context.Context, c rlsv3.RateLimitServiceClient, client string) (bool, error) {
	resp, err := c.ShouldRateLimit(ctx, request(client))
	if err != nil {
		return false, err
	}
	return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
}

// run starts a server, fills the victims' windows, then floods it with
// fresh keys in o.checks rounds, checking after each that no victim got in
// early and light clients still do.
func run(o options) error {
	dir, err := os.MkdirTemp("", "flood-memory")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	httpAddr, grpcAddr, pid := o.attachHTTP, o.attachGRPC, o.attachPID
	if httpAddr == "" {
		cmd, h, g, err := startServer(o, dir)
		if err != nil {
			return err
		}
		defer func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		}()
		httpAddr, grpcAddr, pid = h, g, cmd.Process.Pid
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	f := &flood{o: o, ctx: context.Background(), c: rlsv3.NewRateLimitServiceClient(conn), httpAddr: httpAddr, pid: pid, limit: 5}
	if f.o.rules != "victims" {
		f.limit, f.o.victims, f.o.light, domain = 600, 0, 0, "default"
	}
	o = f.o
	fmt.Printf("server pid %d, rules %s, max_bytes %d, max_keys %d; RSS at start %.0f MiB\n", f.pid, o.rules, o.maxBytes, o.maxKeys, rssMB(f.pid))
	for i := range o.victims {
		for range f.limit {
			if _, err := allowed(f.ctx, f.c, fmt.Sprint("victim-", i)); err != nil {
				return err
			}
		}
	}
	f.start = time.Now()
	fmt.Println("elapsed_s  flood_keys  rss_mib  heap_inuse_mib  store_mib  evicted  victims_admitted  light_rejected/sent")
	if err := f.check(0); err != nil {
		return err
	}
	calls := (o.keys + o.perCall - 1) / o.perCall
	per := (calls + o.checks - 1) / o.checks
	for round := 1; round <= o.checks; round++ {
		if err := f.sendUpTo(min(int64(round*per), int64(calls))); err != nil {
			return err
		}
		if err := f.check(round); err != nil {
			return err
		}
	}
	fmt.Printf("done: %d flood keys in %.0f s; victim requests admitted early: %d; light client requests rejected: %d of %d; RSS at end %.0f MiB\n",
		f.sent.Load(), time.Since(f.start).Seconds(), f.totalAdmitted, f.totalLightRej, f.totalLight, rssMB(f.pid))
	if f.totalAdmitted > 0 {
		return fmt.Errorf("%d victim requests admitted before their window allowed", f.totalAdmitted)
	}
	return nil
}

// flood is one run's client side: the server it floods and the totals.
type flood struct {
	o        options
	ctx      context.Context
	c        rlsv3.RateLimitServiceClient
	httpAddr string
	pid      int
	limit    int
	start    time.Time
	sent     atomic.Int64 // flood keys sent
	next     atomic.Int64 // next flood call to send

	totalAdmitted, totalLightRej, totalLight int
}

// check sends one request per victim (none may be admitted) and a light
// client's limit of requests for each light client (none should be
// rejected), and prints a row of figures.
func (f *flood) check(round int) error {
	o := f.o
	admitted := 0
	for i := range o.victims {
		ok, err := allowed(f.ctx, f.c, fmt.Sprint("victim-", i))
		if err != nil {
			return err
		}
		if ok {
			admitted++
		}
	}
	lightRej := 0
	if o.rules == "victims" {
		for i := range o.light {
			for range f.limit {
				ok, err := allowed(f.ctx, f.c, fmt.Sprintf("light-%d-%d", round, i))
				if err != nil {
					return err
				}
				if !ok {
					lightRej++
				}
			}
		}
	}
	f.totalAdmitted += admitted
	f.totalLightRej += lightRej
	f.totalLight += o.light * f.limit
	fmt.Printf("%9.1f  %10d  %7.0f  %14.0f  %9.1f  %7.0f  %16d  %d/%d\n", time.Since(f.start).Seconds(), f.sent.Load(), rssMB(f.pid),
		metric(f.httpAddr, "go_memstats_heap_inuse_bytes")/(1<<20), metric(f.httpAddr, "floodgate_memstore_bytes")/(1<<20),
		metric(f.httpAddr, "floodgate_memstore_evictions_total"), admitted, lightRej, o.light*f.limit)
	return nil
}

// sendUpTo sends flood calls, o.perCall fresh keys each, from o.workers
// goroutines until end calls have been sent.
func (f *flood) sendUpTo(end int64) error {
	o := f.o
	var wg sync.WaitGroup
	var ferr atomic.Value
	for range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := f.next.Add(1) - 1
				if k >= end {
					f.next.Add(-1)
					return
				}
				entries := make([]string, 0, o.perCall)
				for j := range o.perCall {
					entries = append(entries, "flood-"+strconv.FormatInt(k*int64(o.perCall)+int64(j), 10))
				}
				if _, err := f.c.ShouldRateLimit(f.ctx, request(entries...)); err != nil {
					ferr.Store(err)
					return
				}
				f.sent.Add(int64(o.perCall))
			}
		}()
	}
	wg.Wait()
	if err, _ := ferr.Load().(error); err != nil {
		return err
	}
	return nil
}
