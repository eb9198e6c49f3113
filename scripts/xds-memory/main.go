// Command xds-memory measures what loading a large rule set costs
// `floodgate serve --compat envoy-ratelimit`, pushed over xDS
// (CONFIG_TYPE=GRPC_XDS_SOTW) and from a rule file, side by side: the
// server's peak RSS growth while it loads, how long the load takes, and how
// RLS calls fare meanwhile. Each run starts a redis-server and the server
// with one small rule set, sends calls continuously, then replaces the
// rules with n descriptors {client: tenant-NNNNNN} of 10 a second (pushed
// as one RateLimitConfig by an ADS server of its own, or written over the
// rule file) and waits until a call for the last descriptor is limited. It
// is not part of the test suite; scripts/compat-xds-memory runs it and
// docs/migration-envoy-ratelimit.md quotes it.
//
//	go build -o /tmp/floodgate ./cmd/floodgate
//	go run ./scripts/xds-memory -floodgate /tmp/floodgate -descriptors 120000
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

const typeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

func main() {
	bin := flag.String("floodgate", "floodgate", "the floodgate binary")
	redis := flag.String("redis-server", "redis-server", "the redis-server binary")
	n := flag.Int("descriptors", 120000, "descriptors in the large rule set")
	sources := flag.String("sources", "xds,file", "where the rules come from: xds, file, or both")
	callers := flag.Int("callers", 4, "goroutines sending RLS calls during the load")
	flag.Parse()
	fmt.Printf("%d descriptors; %d callers\n", *n, *callers)
	fmt.Printf("%-6s %12s %9s %16s %14s %10s %10s %10s\n", "source", "rules bytes", "load s", "peak RSS growth", "calls in load", "p50 ms", "p99 ms", "max ms")
	var growth = map[string]float64{}
	for _, src := range strings.Split(*sources, ",") {
		r, err := run(*bin, *redis, src, *n, *callers)
		if err != nil {
			fmt.Fprintln(os.Stderr, "xds-memory:", src+":", err)
			os.Exit(1)
		}
		growth[src] = r.growthMB
		fmt.Printf("%-6s %12d %9.1f %13.0f MB %14d %10.1f %10.1f %10.1f\n", src, r.bytes, r.load.Seconds(), r.growthMB, r.calls, r.p50, r.p99, r.max)
	}
	if growth["file"] > 0 && growth["xds"] > 0 {
		fmt.Printf("peak RSS growth, xDS against file: %.2fx\n", growth["xds"]/growth["file"])
	}
}

type result struct {
	bytes         int
	load          time.Duration
	growthMB      float64
	calls         int
	p50, p99, max float64
}

// rules returns the large rule set as a RateLimitConfig and as YAML, and
// the small one it replaces (one probe descriptor).
func rules(n int) (big *rlconfv3.RateLimitConfig, bigYAML string, small *rlconfv3.RateLimitConfig, smallYAML string) {
	probe := &rlconfv3.RateLimitDescriptor{Key: "probe", RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1 << 30}}
	small = &rlconfv3.RateLimitConfig{Name: "many", Domain: "many", Descriptors: []*rlconfv3.RateLimitDescriptor{probe}}
	smallYAML = "domain: many\ndescriptors:\n  - key: probe\n    rate_limit: {unit: second, requests_per_unit: 1073741824}\n"
	big = &rlconfv3.RateLimitConfig{Name: "many", Domain: "many", Descriptors: []*rlconfv3.RateLimitDescriptor{probe}}
	var b strings.Builder
	b.WriteString(smallYAML)
	for i := range n {
		big.Descriptors = append(big.Descriptors, &rlconfv3.RateLimitDescriptor{Key: "client", Value: fmt.Sprintf("tenant-%06d", i),
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10}})
		fmt.Fprintf(&b, "  - key: client\n    value: tenant-%06d\n    rate_limit: {unit: second, requests_per_unit: 10}\n", i)
	}
	return big, b.String(), small, smallYAML
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// rig is one run's processes: a redis-server, the server in compat mode
// and, for xDS, the ADS server it subscribes to.
type rig struct {
	src      string
	dir      string // holds the runtime directory
	ruleFile string // the rule file, for the file source
	ads      *adsServer
	procs    []*exec.Cmd
	conn     *grpc.ClientConn
	rls      rlsv3.RateLimitServiceClient
	pid      int // the server's
}

// startRig starts redis-server, the rules' source holding small, and
// floodgate serve --compat envoy-ratelimit reading them.
func startRig(bin, redisBin, src string, small *rlconfv3.RateLimitConfig, smallYAML string) (*rig, error) {
	dir, err := os.MkdirTemp("", "xds-memory")
	if err != nil {
		return nil, err
	}
	r := &rig{src: src, dir: dir, ruleFile: filepath.Join(dir, "runtime", "ratelimit", "config", "many.yaml")}
	rport := freePort()
	if err := r.start(exec.Command(redisBin, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")); err != nil {
		return r, err
	}
	gport, hport, dport := freePort(), freePort(), freePort()
	env := append(os.Environ(), "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL=127.0.0.1:"+strconv.Itoa(rport),
		"USE_STATSD=false", "LOG_LEVEL=warn", "HOST=127.0.0.1", "PORT="+strconv.Itoa(hport), "GRPC_HOST=127.0.0.1",
		"GRPC_PORT="+strconv.Itoa(gport), "DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(dport))
	switch src {
	case "xds":
		if r.ads, err = startADS(small); err != nil {
			return r, err
		}
		env = append(env, "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+r.ads.addr, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms")
	case "file":
		if err := os.MkdirAll(filepath.Dir(r.ruleFile), 0o755); err != nil {
			return r, err
		}
		if err := os.WriteFile(r.ruleFile, []byte(smallYAML), 0o644); err != nil {
			return r, err
		}
		env = append(env, "RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
			"RUNTIME_WATCH_ROOT=false")
	default:
		return r, fmt.Errorf("unknown source %q", src)
	}
	fg := exec.Command(bin, "serve", "--compat", "envoy-ratelimit")
	fg.Env, fg.Stderr = env, os.Stderr
	if err := r.start(fg); err != nil {
		return r, err
	}
	r.pid = fg.Process.Pid
	if r.conn, err = grpc.NewClient("127.0.0.1:"+strconv.Itoa(gport), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return r, err
	}
	r.rls = rlsv3.NewRateLimitServiceClient(r.conn)
	return r, nil
}

func (r *rig) start(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	r.procs = append(r.procs, cmd)
	return nil
}

// stop ends every process the rig started, and removes its directory.
func (r *rig) stop() {
	if r.conn != nil {
		r.conn.Close()
	}
	if r.ads != nil {
		r.ads.stop()
	}
	for i := len(r.procs) - 1; i >= 0; i-- {
		r.procs[i].Process.Kill()
		r.procs[i].Wait()
	}
	os.RemoveAll(r.dir)
}

// replace puts the large rule set in place of the small one: pushed, or
// written outside the watched directory and moved in at once.
func (r *rig) replace(big *rlconfv3.RateLimitConfig, bigYAML string) error {
	if r.src == "xds" {
		r.ads.push(big)
		return nil
	}
	tmp := filepath.Join(r.dir, "many.yaml")
	if err := os.WriteFile(tmp, []byte(bigYAML), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, r.ruleFile)
}

// limited reports whether the server answers req with a limit.
func (r *rig) limited(req *rlsv3.RateLimitRequest) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.rls.ShouldRateLimit(ctx, req)
	return err == nil && len(resp.GetStatuses()) == 1 && resp.GetStatuses()[0].GetCurrentLimit() != nil
}

// call is one RLS call of the load: when it started and how long it took.
type call struct {
	start time.Time
	took  time.Duration
}

// load sends req from callers goroutines, a millisecond apart each, until
// the function it returns is called, which returns the calls answered.
func (r *rig) load(req *rlsv3.RateLimitRequest, callers int) func() []call {
	var stop atomic.Bool
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := r.rls.ShouldRateLimit(ctx, req)
				cancel()
				if err == nil {
					mu.Lock()
					calls = append(calls, call{start, time.Since(start)})
					mu.Unlock()
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return func() []call { stop.Store(true); wg.Wait(); return calls }
}

func descriptorRequest(key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "many", Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}

// run measures one source: the server serving the small rule set, calls
// going, the large set put in place, until its last descriptor is limited.
func run(bin, redisBin, src string, n, callers int) (result, error) {
	var res result
	big, bigYAML, small, smallYAML := rules(n)
	if src == "xds" {
		b, _ := proto.Marshal(mustAny(big))
		res.bytes = len(b)
	} else {
		res.bytes = len(bigYAML)
	}
	r, err := startRig(bin, redisBin, src, small, smallYAML)
	defer r.stop()
	if err != nil {
		return res, err
	}
	probe, last := descriptorRequest("probe", ""), descriptorRequest("client", fmt.Sprintf("tenant-%06d", n-1))
	if !waitUntil(time.Minute, func() bool { return r.limited(probe) }) {
		return res, fmt.Errorf("the server did not serve the small rule set within a minute")
	}
	time.Sleep(2 * time.Second) // settle
	_, before := memory(r.pid)
	stop := r.load(probe, callers)
	time.Sleep(time.Second)
	t0 := time.Now()
	if err := r.replace(big, bigYAML); err != nil {
		return res, err
	}
	ok := waitUntil(10*time.Minute, func() bool { return r.limited(last) })
	t1 := time.Now()
	time.Sleep(time.Second)
	calls := stop()
	if !ok {
		return res, fmt.Errorf("the large rule set did not load within ten minutes")
	}
	peak, _ := memory(r.pid)
	res.load = t1.Sub(t0)
	res.growthMB = float64(peak-before) / (1 << 20)
	var lat []float64
	for _, c := range calls {
		if !c.start.Before(t0) && c.start.Before(t1) {
			lat = append(lat, float64(c.took)/float64(time.Millisecond))
		}
	}
	slices.Sort(lat)
	res.calls = len(lat)
	if len(lat) > 0 {
		res.p50, res.p99, res.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return res, nil
}

// memory returns the process's peak and current RSS in bytes (VmHWM,
// VmRSS).
func memory(pid int) (hwm, rss int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			hwm = kb << 10
		case "VmRSS":
			rss = kb << 10
		}
	}
	return hwm, rss
}

func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// adsServer is an aggregated discovery server holding one RateLimitConfig;
// push replaces it and sends it on every open stream.
type adsServer struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	addr    string
	srv     *grpc.Server
	mu      sync.Mutex
	conf    *rlconfv3.RateLimitConfig
	version int
	streams map[chan struct{}]bool
}

func startADS(conf *rlconfv3.RateLimitConfig) (*adsServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &adsServer{addr: ln.Addr().String(), conf: conf, version: 1, streams: map[chan struct{}]bool{},
		srv: grpc.NewServer(grpc.MaxSendMsgSize(64 << 20))}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(a.srv, a)
	go a.srv.Serve(ln)
	return a, nil
}

func (a *adsServer) stop() { a.srv.Stop() }

func (a *adsServer) push(conf *rlconfv3.RateLimitConfig) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.conf, a.version = conf, a.version+1
	for ch := range a.streams {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (a *adsServer) StreamAggregatedResources(st discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	changed := make(chan struct{}, 1)
	a.mu.Lock()
	a.streams[changed] = true
	a.mu.Unlock()
	defer func() { a.mu.Lock(); delete(a.streams, changed); a.mu.Unlock() }()
	reqs := make(chan error, 1)
	go func() {
		for {
			if _, err := st.Recv(); err != nil {
				reqs <- err
				return
			}
		}
	}()
	send := func() error {
		a.mu.Lock()
		conf, v := a.conf, a.version
		a.mu.Unlock()
		return st.Send(&discoveryv3.DiscoveryResponse{VersionInfo: strconv.Itoa(v), TypeUrl: typeURL,
			Resources: []*anypb.Any{mustAny(conf)}, Nonce: strconv.Itoa(v)})
	}
	if err := send(); err != nil {
		return err
	}
	for {
		select {
		case err := <-reqs:
			return err
		case <-changed:
			if err := send(); err != nil {
				return err
			}
		}
	}
}
