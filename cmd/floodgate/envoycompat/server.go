package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
	"github.com/floodgate-dev/floodgate/rls"
)

// ReadRuntime reads the rule files of the runtime directory as
// envoyproxy/ratelimit does. With RUNTIME_WATCH_ROOT (the default) every
// file under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY whose name, relative to it
// with '/' read as '.', starts with RUNTIME_APPDIRECTORY + "." is a rule
// file (config.basic.yaml); without it every file under
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY is. Whatever the
// extension. With RUNTIME_IGNOREDOTFILES, files and directories whose name
// starts with '.' are skipped. The files come back in name order.
func ReadRuntime(s Settings) ([]File, error) {
	dir := filepath.Join(s.RuntimePath, s.RuntimeSubdirectory)
	if !s.RuntimeWatchRoot {
		dir = filepath.Join(dir, s.RuntimeAppDirectory)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("runtime directory: %v (RUNTIME_ROOT=%s RUNTIME_SUBDIRECTORY=%s)", err, s.RuntimePath, s.RuntimeSubdirectory)
	}
	var files []File
	err := filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, as there
		}
		dot := strings.HasPrefix(info.Name(), ".")
		if info.IsDir() {
			if s.RuntimeIgnoreDotFiles && dot && path != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if s.RuntimeIgnoreDotFiles && dot {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return nil
		}
		key := strings.ReplaceAll(rel, string(filepath.Separator), ".")
		if s.RuntimeWatchRoot && !strings.HasPrefix(key, s.RuntimeAppDirectory+".") {
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files = append(files, File{Name: key, Text: text})
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, err
}

// Server is the compatibility mode's server: the RLS gRPC service, the
// HTTP listener (/json, /healthcheck) and the debug listener.
type Server struct {
	set     Settings
	log     *slog.Logger
	svc     *Service
	clients []rueidis.Client
	health  *health.Server
	grpc    *grpc.Server
	http    *http.Server
	debug   *http.Server
	prom    *http.Server  // nil without USE_PROMETHEUS
	certs   *certReloader // nil without GRPC_SERVER_USE_TLS
	lis     map[string]net.Listener
	healthy bool
	mu      sync.Mutex
	// stopXDS ends the xDS client and waits for it (a no-op with files).
	stopXDS func()
	// admission bounds the gRPC calls in flight and waiting for their
	// message; guardLog counts what the guards refuse (grpcguard.go).
	admission *grpcguard.Admission
	guardLog  *guardLog
}

// Listener names, for Addr.
const (
	ListenerHTTP  = "http"
	ListenerGRPC  = "grpc"
	ListenerDebug = "debug"
	// ListenerPrometheus serves the stats with USE_PROMETHEUS.
	ListenerPrometheus = "prometheus"
)

// New reads the rule files, connects to Redis and binds the listeners. A
// rule file that does not load stops the start.
func New(ctx context.Context, set Settings, log *slog.Logger) (*Server, error) {
	var cfg *Config // with xDS, none until the first push
	if set.ConfigType != configTypeXDS {
		files, err := ReadRuntime(set)
		if err != nil {
			return nil, err
		}
		if cfg, err = LoadConfig(files, set.MergeDomainConfig, set.Wildcards); err != nil {
			return nil, fmt.Errorf("rule files: %w", err)
		}
		warnLiteral(log, cfg)
	}
	s := &Server{set: set, log: log, lis: map[string]net.Listener{}, stopXDS: func() {}}
	logParallelism(log, set)
	client, err := dialRetrying(ctx, set, set.Redis, log)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	s.clients = append(s.clients, client)
	var perSecond rueidis.Client
	if set.RedisPerSecond {
		if perSecond, err = dialRetrying(ctx, set, set.PerSecond, log); err != nil {
			s.closeClients()
			return nil, fmt.Errorf("REDIS_PERSECOND_URL: %w", err)
		}
		s.clients = append(s.clients, perSecond)
	}
	if s.svc, err = NewService(set, cfg, client, perSecond, nil); err != nil {
		s.closeClients()
		return nil, err
	}
	if s.svc.trace, err = newTracing(ctx, set.Tracing); err != nil {
		s.closeClients()
		return nil, err
	}
	s.healthy = !set.HealthyWithAtLeastOneConfigLoaded || cfg != nil && !cfg.Empty()

	s.health = health.NewServer()
	s.setHealth(s.healthy)
	if err := s.newGRPC(); err != nil {
		s.closeClients()
		return nil, err
	}

	var decide httpapi.RateLimitService = s.svc
	if s.svc.trace != nil {
		decide = jsonService{s.svc, s.svc.trace}
	}
	js, err := httpapi.NewEnvoyJSON(httpapi.EnvoyJSONOptions{Service: decide, Logger: log,
		AcceptType: func(string) bool { return true }, FailureStatus: http.StatusBadRequest})
	if err != nil {
		s.closeClients()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/json", js)
	mux.HandleFunc("/healthcheck", s.serveHealth)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}

	s.debug = &http.Server{Handler: s.debugMux(), ReadHeaderTimeout: 10 * time.Second}
	if st := s.svc.stats; st != nil && st.prom != nil {
		pmux := http.NewServeMux()
		pmux.Handle(set.PrometheusPath, promhttp.HandlerFor(st.prom.reg, promhttp.HandlerOpts{}))
		s.prom = &http.Server{Handler: pmux, ReadHeaderTimeout: 10 * time.Second}
	}

	if err := s.startXDS(ctx); err != nil {
		s.closeClients()
		return nil, err
	}
	if err := s.listen(); err != nil {
		s.stopXDS()
		s.closeListeners()
		s.closeClients()
		return nil, err
	}
	return s, nil
}

// newGRPC makes the gRPC server: the RLS service and gRPC health, with
// TLS when GRPC_SERVER_USE_TLS asks for it, behind the bounds on hostile
// traffic of serve's own mode (grpcguard.go).
func (s *Server) newGRPC() error {
	opts := []grpc.ServerOption{rls.ServerOption(), grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: s.set.GrpcMaxConnectionAge, MaxConnectionAgeGrace: s.set.GrpcMaxConnectionAgeGrace}),
		// Calls run on long-lived workers (32 per CPU, as in serve's own
		// mode) instead of a new goroutine each, whose stack grows anew
		// on every call.
		grpc.NumStreamWorkers(uint32(32 * runtime.GOMAXPROCS(0)))}
	var creds credentials.TransportCredentials // nil: plaintext
	if s.set.GrpcTLS.Use {
		c, certs, err := grpcServerTLS(s.set.GrpcTLS, s.log)
		if err != nil {
			return err
		}
		s.certs = certs
		creds = credentials.NewTLS(c)
	}
	// The guards' interceptors come first: a refused call costs nothing more.
	opts = append(opts, s.grpcGuards(creds)...)
	if s.svc.trace != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.svc.trace.interceptor()))
	}
	if s.svc.stats != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(s.svc.stats.interceptor(s.set.statsdOn())))
	}
	s.grpc = grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(s.grpc, s.svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return nil
}

// warnLiteral logs every descriptor value whose '*' is a literal character
// under FLOODGATE_WILDCARDS=trailing, so that a rule written for a newer
// envoyproxy/ratelimit (where it is a wildcard) does not silently match
// nothing.
func warnLiteral(log *slog.Logger, cfg *Config) {
	for _, d := range cfg.Literal {
		log.Warn("FLOODGATE_WILDCARDS=trailing: a '*' inside this descriptor's value is a literal character, as in envoyproxy/ratelimit before envoyproxy/ratelimit#1085", "descriptor", d)
	}
}

// logParallelism says, once, what a cluster pipeline parallelism other
// than the reference's default (1) does here: a request's commands already
// go to their masters at once, so the value bounds nothing.
func logParallelism(log *slog.Logger, set Settings) {
	for _, r := range []struct {
		name string
		r    RedisSettings
		used bool
	}{{"REDIS_CLUSTER_PIPELINE_PARALLELISM", set.Redis, true}, {"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", set.PerSecond, set.RedisPerSecond}} {
		if r.used && r.r.Type == "cluster" && r.r.ClusterParallelism != 1 {
			log.Info(r.name+": a request's commands go to their masters at once, each master's on one pipelined connection, whatever the value", "value", r.r.ClusterParallelism)
		}
	}
}

// dialRetrying connects to r as the reference does at start: on failure it
// waits and tries again, the wait doubling from REDIS_STARTUP_INITIAL_INTERVAL
// up to REDIS_STARTUP_MAX_INTERVAL, until REDIS_STARTUP_MAX_ELAPSED_TIME
// (0: until ctx ends).
func dialRetrying(ctx context.Context, set Settings, r RedisSettings, log *slog.Logger) (rueidis.Client, error) {
	start := time.Now()
	wait := max(set.RedisStartupInitial, time.Millisecond)
	for {
		c, err := dialRedis(ctx, r)
		if err == nil {
			return c, nil
		}
		elapsed := time.Since(start)
		if set.RedisStartupMaxElapsed > 0 && elapsed >= set.RedisStartupMaxElapsed {
			return nil, fmt.Errorf("timed out after %s (REDIS_STARTUP_MAX_ELAPSED_TIME): %w", elapsed.Round(time.Millisecond), err)
		}
		log.Warn("retrying the connection to Redis", "in", wait, "elapsed", elapsed.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("start cancelled while waiting for Redis: %w", err)
		case <-t.C:
		}
		wait = min(2*wait, max(set.RedisStartupMax, wait))
	}
}

// Service returns the RLS service, for tests.
func (s *Server) Service() *Service { return s.svc }

func (s *Server) listen() error {
	grpcNet, grpcAddr := "tcp", net.JoinHostPort(s.set.GrpcHost, strconv.Itoa(s.set.GrpcPort))
	if s.set.GrpcUds != "" {
		grpcNet, grpcAddr = "unix", s.set.GrpcUds
	}
	for _, l := range []struct{ name, network, addr, env string }{
		{ListenerHTTP, "tcp", net.JoinHostPort(s.set.Host, strconv.Itoa(s.set.Port)), "HOST/PORT"},
		{ListenerGRPC, grpcNet, grpcAddr, "GRPC_HOST/GRPC_PORT"},
		{ListenerDebug, "tcp", net.JoinHostPort(s.set.DebugHost, strconv.Itoa(s.set.DebugPort)), "DEBUG_HOST/DEBUG_PORT"},
	} {
		ln, err := net.Listen(l.network, l.addr)
		if err != nil {
			return fmt.Errorf("%s: %v", l.env, err)
		}
		if l.name == ListenerGRPC {
			ln = s.limitConns(ln)
		}
		s.lis[l.name] = ln
	}
	if s.prom != nil {
		ln, err := net.Listen("tcp", s.set.PrometheusAddr)
		if err != nil {
			return fmt.Errorf("PROMETHEUS_ADDR: %v", err)
		}
		s.lis[ListenerPrometheus] = ln
	}
	return nil
}

// Addr returns the address a listener is bound to.
func (s *Server) Addr(name string) string {
	if ln := s.lis[name]; ln != nil {
		return ln.Addr().String()
	}
	return ""
}

func (s *Server) setHealth(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("ratelimit", st)
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ok := s.healthy
	s.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Write([]byte("OK"))
}

// Reload reads the rule files again. A set that does not load is logged
// and the running one kept, as envoyproxy/ratelimit does.
func (s *Server) Reload() error {
	files, err := ReadRuntime(s.set)
	if err == nil {
		err = s.apply(files)
	}
	if err != nil {
		s.log.Error("Error loading new configuration", "err", err)
	}
	return err
}

// apply loads files and, when they load, serves them in place of the
// running rules; when they do not, the running rules stay.
func (s *Server) apply(files []File) error {
	cfg, err := LoadConfig(files, s.set.MergeDomainConfig, s.set.Wildcards)
	s.svc.countConfigLoad(err)
	if err != nil {
		return err
	}
	warnLiteral(s.log, cfg)
	s.svc.SetConfig(cfg)
	if s.set.HealthyWithAtLeastOneConfigLoaded {
		s.mu.Lock()
		s.healthy = !cfg.Empty()
		s.mu.Unlock()
		s.setHealth(!cfg.Empty())
	}
	s.log.Info("Successfully loaded new configuration", "files", len(files))
	return nil
}

// Run serves until ctx ends, reloading the rule files when the runtime
// directory changes, then stops: health turns NOT_SERVING, listeners close
// and calls in flight finish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 4)
	go func() { errc <- s.grpc.Serve(s.lis[ListenerGRPC]) }()
	go func() { errc <- s.http.Serve(s.lis[ListenerHTTP]) }()
	go func() { errc <- s.debug.Serve(s.lis[ListenerDebug]) }()
	if s.prom != nil {
		go func() { errc <- s.prom.Serve(s.lis[ListenerPrometheus]) }()
	}
	if s.set.ConfigType != configTypeXDS {
		stopWatch := s.watch(ctx)
		defer stopWatch()
	}
	if s.certs != nil {
		stopCerts := s.certs.watch(ctx)
		defer stopCerts()
	}
	if s.set.statsdOn() && s.svc.stats != nil {
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { newStatsdSink(s.set.Stats, s.svc.stats, s.log).run(sctx); close(done) }()
		// Stopped last: the final flush sends the calls served while stopping.
		defer func() { stop(); <-done }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	s.stopXDS() // no push may turn health back on while stopping
	s.mu.Lock()
	s.healthy = false
	s.mu.Unlock()
	s.setHealth(false)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.http.Shutdown(sctx)
	s.debug.Shutdown(sctx)
	if s.prom != nil {
		s.prom.Shutdown(sctx)
	}
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-sctx.Done():
		s.grpc.Stop()
	}
	s.admission.Close()
	s.closeClients()
	s.svc.trace.shutdown()
	return err
}

// watch reloads the rule files on any change under the runtime directory
// (and, with RUNTIME_WATCH_ROOT, a swap of RUNTIME_ROOT's symlink).
func (s *Server) watch(ctx context.Context) (stop func()) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("rule files will not be reloaded", "err", err)
		return func() {}
	}
	dir := filepath.Join(s.set.RuntimePath, s.set.RuntimeSubdirectory)
	if !s.set.RuntimeWatchRoot {
		dir = filepath.Join(dir, s.set.RuntimeAppDirectory)
	} else {
		_ = w.Add(filepath.Dir(filepath.Clean(s.set.RuntimePath)))
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = w.Add(p)
		}
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				s.Reload()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("watching the rule files", "err", err)
			}
		}
	}()
	return func() { w.Close(); <-done }
}

func (s *Server) closeListeners() {
	for _, ln := range s.lis {
		ln.Close()
	}
}

func (s *Server) closeClients() {
	for _, c := range s.clients {
		c.Close()
	}
	s.clients = nil
}
