package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/gubernator"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/metrics"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/tracing"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/gateway"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/rls"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
	"github.com/floodgate-dev/floodgate/rules/reload"
	"github.com/floodgate-dev/floodgate/rules/rulelog"
	"github.com/floodgate-dev/floodgate/store"
)

// Server is a configured Floodgate service. Create it with New, bind its
// listeners with Listen, and run it with Serve (or both with Run).
type Server struct {
	cfg Config
	// store decides (the memory store or the distributed node), clock is
	// the time WithClock gave (nil: time.Now), guber gubernator's API.
	store  store.Store
	clock  func() time.Time
	guber  *gubernator.Service
	log    *slog.Logger
	engine *rules.Engine
	rec    *metrics.Recorder
	check  *observed
	// tracing makes OpenTelemetry spans; nil when tracing is off.
	tracing *tracing.Tracing

	mem      *memstore.Store
	redis    *redisstore.Store
	node     *distributed.Node
	exchange *redisstore.Exchange // to the other regions (arrangement.go)
	remotes  []*redisstore.Store  // the other regions' stores

	handler   http.Handler // API, and admin unless it has its own listener
	adminH    http.Handler // nil without an admin listener
	envoyJSON http.Handler // POST /json, envoyproxy/ratelimit's JSON endpoint
	access    *access
	gatewayH  http.Handler // nil without routes
	grpc      *grpc.Server
	health    *health.Server
	listeners map[string]net.Listener
	tls       map[string]*tls.Config // by listener name; absent for plain text

	inflight    inflight             // requests being served, for the shutdown report
	admission   *grpcguard.Admission // the gRPC listener's call bounds
	refusedOnce sync.Once
	refused     *prometheus.CounterVec         // connections refused by a cap
	capped      map[string]*connlimit.Listener // listeners under connection caps, by name
}

// Listener names, for Addr.
const (
	ListenerHTTP    = "http"
	ListenerGRPC    = "grpc"
	ListenerGateway = "gateway"
)

// New builds the server cfg describes: the store (connecting to Redis if
// configured), the rule engine with its rules, the metrics recorder and
// every front end. It does not listen yet. log may be nil (slog.Default()).
func New(ctx context.Context, cfg Config, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	if !cfg.Admin.ShowKeyValues {
		log = slog.New(maskingHandler{log.Handler()})
	}
	limit, _ := ContainerMemoryLimit()
	cfg.FitMemory(limit) // store bounds left at 0 (serve has done it already)
	s := &Server{cfg: cfg, log: log, rec: metrics.New(), listeners: map[string]net.Listener{},
		capped: map[string]*connlimit.Listener{}}
	var err error
	if s.tls, err = loadListenerTLS(cfg); err != nil {
		return nil, err
	}
	if s.access, err = newAccess(cfg.Admin); err != nil {
		return nil, err
	}

	set := rules.Default()
	if cfg.Rules != "" {
		if set, err = rules.Load(cfg.Rules); err != nil {
			return nil, err
		}
	}
	if s.tracing, err = tracing.New(ctx, cfg.Tracing, cfg.Store.Type, s.arrangement()); err != nil {
		return nil, err
	}
	s.clock = o.clock
	st, err := s.buildStore(ctx)
	if err != nil {
		s.shutdownTracing(ctx)
		return nil, err
	}
	s.store = st
	engOpts := []rules.EngineOption{rules.WithGlobalShadow(cfg.Shadow)}
	if o.clock != nil {
		engOpts = append(engOpts, rules.WithClock(o.clock))
	}
	if s.redis != nil { // late charges and peeks go to Redis itself
		engOpts = append(engOpts, rules.WithCharger(s.tracing.Store(s.redis).(store.Syncer)))
	}
	s.engine = rules.NewEngine(set, s.tracing.Store(st), engOpts...)
	s.rec.RulesLoaded(set)
	// Requests no rule applies to pass unlimited; they are counted by
	// domain in metrics and logged at most once a minute with an example.
	unmatched := rulelog.NewUnmatched(log, time.Minute)
	// Keys that reach a rule's warning level are logged once per period.
	warnings := rulelog.NewWarnings(log)
	s.check = &observed{engine: s.engine, rec: s.rec, unmatched: unmatched, tracing: s.tracing, warnings: warnings}
	s.rec.SetStoreFunc(s.storeHealth)

	// From here on the store is open: any failure closes it, in one place.
	if err := s.buildFrontEnds(unmatched); err != nil {
		s.closeStore(ctx)
		return nil, err
	}
	return s, nil
}

// buildFrontEnds builds the HTTP API, the RLS service (gRPC and its JSON
// endpoint) and the gateway on s.check.
func (s *Server) buildFrontEnds(unmatched *rulelog.Unmatched) error {
	cfg, log := s.cfg, s.log
	s.buildGubernator()
	proxies, err := httplimit.ParseProxies(cfg.TrustedProxies...)
	if err != nil {
		return err
	}
	api, err := httpapi.New(httpapi.Options{Engine: s.check, MaxBodyBytes: cfg.MaxBodyBytes, Logger: log, Shadow: cfg.Shadow,
		Overrides: cfg.HTTP.OverridePolicy()})
	if err != nil {
		return err
	}
	rlsOpts := []rls.Option{rls.WithOverrides(cfg.GRPC.OverridePolicy()), rls.WithMaxDescriptors(cfg.RLS.MaxDescriptors, cfg.RLS.MaxEntries)}
	if cfg.RLS.Headers {
		rlsOpts = append(rlsOpts, rls.WithHeaders())
	}
	rlsSvc := rls.New(s.check, log, rlsOpts...)
	// envoyproxy/ratelimit's JSON endpoint, on the public listener: its
	// callers get the HTTP listener's override policy.
	jsonOpts := append([]rls.Option{rls.WithOverrides(cfg.HTTP.OverridePolicy())}, rlsOpts[1:]...)
	if s.envoyJSON, err = httpapi.NewEnvoyJSON(httpapi.EnvoyJSONOptions{Service: rls.New(s.check, log, jsonOpts...), MaxBodyBytes: cfg.MaxBodyBytes, Logger: log}); err != nil {
		return err
	}
	s.handler, s.adminH = s.buildMuxes(api, s.access)
	if len(cfg.Gateway.Routes) > 0 {
		gw, err := s.buildGateway(proxies, unmatched)
		if err != nil {
			return err
		}
		s.gatewayH = gw
		s.rec.Registry().MustRegister(gatewayCollector{gw})
	}
	return s.buildGRPC(rlsSvc)
}

// buildGateway builds the reverse proxy of cfg.Gateway with its rate
// limiting middleware.
func (s *Server) buildGateway(proxies *httplimit.Proxies, unmatched *rulelog.Unmatched) (*gateway.Gateway, error) {
	cfg, log := s.cfg, s.log
	var sources []httprules.Source
	for _, d := range cfg.Gateway.Descriptors {
		src, err := httprules.ParseSource(d, proxies)
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	// The gateway's middleware logs its unmatched requests itself (with
	// the path), as the middleware does anywhere.
	gwCheck := &observed{engine: s.engine, rec: s.rec, tracing: s.tracing, warnings: s.check.warnings}
	mw, err := httprules.Middleware(httprules.Options{Checker: gwCheck, Domain: cfg.Gateway.Domain, Sources: sources, Proxies: proxies, Logger: log,
		Unmatched: unmatched})
	if err != nil {
		return nil, err
	}
	var routes []gateway.Route
	for _, r := range cfg.Gateway.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil {
			return nil, fmt.Errorf("gateway route %s: %v", r.Prefix, err)
		}
		routes = append(routes, gateway.Route{Prefix: r.Prefix, Upstream: u, Transport: gateway.Transport(r.Transport), Path: gateway.PathPolicy(r.Path)})
	}
	return gateway.New(gateway.Options{Routes: routes, Limit: mw, Logger: log, Proxies: proxies})
}

// buildGRPC builds the gRPC server with the RLS, quota lease, RLQS and
// health services.
func (s *Server) buildGRPC(rlsSvc *rls.Service) error {
	cfg := s.cfg
	var creds credentials.TransportCredentials
	if c := s.tls[ListenerGRPC]; c != nil {
		creds = credentials.NewTLS(c)
	}
	// The guards come first: their tap and interceptors see every call.
	gopts := s.grpcGuards(creds)
	// Stream workers: gRPC otherwise starts a goroutine per call, whose
	// stack then grows (and is copied) on every call; reusing goroutines
	// saves that work (BENCHMARKS.md, "The server").
	// When every worker is busy, gRPC starts a goroutine as before.
	gopts = append(gopts, grpc.NumStreamWorkers(uint32(streamWorkers())))
	gopts = append(gopts, cfg.Connections.grpcOptions()...)
	gopts = append(gopts, grpc.ChainUnaryInterceptor(s.inflight.unary), rls.ServerOption())
	if s.tracing != nil { // the caller's trace context, for the decision spans
		gopts = append(gopts, grpc.ChainUnaryInterceptor(s.tracing.UnaryServerInterceptor()))
	}
	s.grpc = grpc.NewServer(gopts...)
	rlsSvc.Register(s.grpc)
	if s.guber != nil {
		s.guber.Register(s.grpc)
	}
	s.registerQuota()
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.GRPC.Reflection { // describes every service registered above
		reflection.Register(s.grpc)
	}
	return nil
}

// buildStore creates the counter store cfg names.
func (s *Server) buildStore(ctx context.Context) (store.Store, error) {
	c := s.cfg.Store
	if c.Type == StoreMemory {
		s.mem = memstore.New(memstore.Options{MaxKeys: c.MaxKeys, MaxBytes: c.MaxBytes})
		registerMemStore(s.rec.Registry(), s.mem)
		return s.mem, nil
	}
	rs, err := s.connectRedis(ctx)
	if err != nil {
		return nil, err
	}
	s.redis = rs
	a := s.cfg.Arrangement
	node, err := distributed.New(distributed.Options{
		Arrangement:     a.Mode,
		Nodes:           a.Nodes,
		Membership:      a.membership(),
		Region:          a.region(),
		Interval:        a.Interval,
		Deadline:        a.Deadline,
		SyncDeadline:    a.SyncDeadline,
		BreakerFailures: a.BreakerFailures,
		BreakerCooldown: a.BreakerCooldown,
		MaxDeadline:     max(a.MaxDeadline, a.Deadline),
		MaxKeys:         a.MaxKeys,
		MaxBytes:        a.MaxBytes,
		MaxPendingBytes: a.MaxPendingBytes,
		Shared:          rs,
		Clock:           s.clock,
		StoreName:       rs.Address(),
		Logger:          s.log,
	})
	if err != nil {
		rs.Close()
		return nil, err
	}
	s.node = node
	if err := s.buildExchange(ctx, rs); err != nil {
		node.Close(ctx)
		rs.Close()
		return nil, err
	}
	return node, nil
}

// Engine returns the server's rule engine.
func (s *Server) Engine() *rules.Engine { return s.engine }

// Handler returns the admin and API handler (what the http listener serves).
func (s *Server) Handler() http.Handler { return s.handler }

// Listen binds every enabled listener. After it returns, Addr reports the
// bound addresses (useful with port 0).
func (s *Server) Listen() error {
	bind := func(name string, l Listener) error {
		if !l.Enabled() {
			return nil
		}
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			return fmt.Errorf("%s listener: %w", name, err)
		}
		s.listeners[name] = s.limitConns(name, ln)
		return nil
	}
	if err := bind(ListenerHTTP, s.cfg.HTTP); err != nil {
		return err
	}
	if err := bind(ListenerGRPC, s.cfg.GRPC); err != nil {
		s.closeListeners()
		return err
	}
	if s.adminH != nil {
		if err := bind(ListenerAdmin, Listener{Addr: s.cfg.Admin.Addr}); err != nil {
			s.closeListeners()
			return err
		}
	}
	if s.gatewayH != nil {
		if err := bind(ListenerGateway, Listener{Addr: s.cfg.Gateway.Addr}); err != nil {
			s.closeListeners()
			return err
		}
	}
	return nil
}

func (s *Server) closeListeners() {
	for _, ln := range s.listeners {
		ln.Close()
	}
}

// Addr returns the address the named listener (ListenerHTTP, ListenerGRPC, ListenerAdmin or ListenerGateway) is
// bound to, or "" if it is not.
func (s *Server) Addr(name string) string {
	if ln, ok := s.listeners[name]; ok {
		return ln.Addr().String()
	}
	return ""
}

// Run is Listen followed by Serve.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		s.closeStore(ctx)
		return err
	}
	return s.Serve(ctx)
}

// Serve serves on the bound listeners and watches the rule file until ctx
// ends, then shuts down gracefully: it stops accepting connections, lets
// requests in flight finish (for at most ShutdownTimeout), closes the
// distributed node so unsynced counts are pushed, and closes the store.
// It returns an error wrapping ErrUncleanShutdown if requests were still
// running at the timeout (they are cut off and counted in the log) or
// unsynced counts could not be pushed.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 4)
	servers := s.startListeners(errc)

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var wg sync.WaitGroup
	s.startBackground(wctx, &wg)

	s.log.Info("floodgate serving", "store", s.cfg.Store.Type, "store_addr", s.cfg.Store.Address(), "arrangement", s.arrangement(),
		"rules", s.rulesName(), "domain", s.engine.Set().Domain(), "shadow", s.cfg.Shadow, "tracing", s.tracing != nil)
	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "cause", context.Cause(ctx))
	case runErr = <-errc:
		s.log.Error("listener failed; shutting down", "err", runErr)
	}
	stopWatch()
	serr := s.shutdown(servers)
	wg.Wait()
	return errors.Join(runErr, serr)
}

// startListeners serves every bound listener in its own goroutine; a
// listener that fails sends its error on errc. It returns the HTTP servers,
// for shutdown.
func (s *Server) startListeners(errc chan<- error) []*http.Server {
	var servers []*http.Server
	add := func(name string, h http.Handler) {
		if name == ListenerGateway {
			h = s.tracing.Gateway(h)
		} else {
			h = s.tracing.HTTP(h)
		}
		if hs := s.serveHTTP(name, s.inflight.wrap(accessLog(name, h, s.log)), errc); hs != nil {
			servers = append(servers, hs)
		}
	}
	add(ListenerHTTP, s.handler)
	if s.adminH != nil {
		add(ListenerAdmin, s.adminH)
	}
	if s.gatewayH != nil {
		add(ListenerGateway, s.gatewayH)
	}
	if ln, ok := s.listeners[ListenerGRPC]; ok {
		s.log.Info("listening", "listener", ListenerGRPC, "addr", ln.Addr().String(), "tls", s.tls[ListenerGRPC] != nil,
			"client_certificates", clientAuthName(s.tls[ListenerGRPC]))
		go func() {
			if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("grpc listener: %w", err)
			}
		}()
	}
	return servers
}

// serveHTTP serves h on the listener called name, if it is bound, and
// returns its server (nil if not bound).
func (s *Server) serveHTTP(name string, h http.Handler, errc chan<- error) *http.Server {
	ln, ok := s.listeners[name]
	if !ok {
		return nil
	}
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.Connections.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.httpReadTimeout(),
		WriteTimeout:      s.cfg.Connections.WriteTimeout,
		IdleTimeout:       s.cfg.Connections.IdleTimeout,
		ErrorLog:          s.errorLog(name),
	}
	if name == ListenerGateway {
		hs.ReadTimeout = s.cfg.Connections.GatewayReadTimeout
		hs.WriteTimeout = s.cfg.Connections.GatewayWriteTimeout
	}
	scheme := "http"
	tc := s.tls[name]
	if tc != nil {
		scheme = "https"
		hs.TLSConfig = tc.Clone() // HTTP/2's set-up adds its protocol
		if err := s.guardHTTP2(name, hs); err != nil {
			errc <- fmt.Errorf("%s listener: %w", name, err)
			return nil
		}
	}
	s.log.Info("listening", "listener", name, "addr", scheme+"://"+ln.Addr().String(), "client_certificates", clientAuthName(tc))
	go func() {
		var err error
		if tc != nil {
			err = hs.ServeTLS(ln, "", "") // the certificate is in hs.TLSConfig
		} else {
			err = hs.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("%s listener: %w", name, err)
		}
	}()
	return hs
}

// startBackground starts, until ctx ends, the rule file watcher (if rules
// come from a file) and the store health reporter, counted in wg.
func (s *Server) startBackground(ctx context.Context, wg *sync.WaitGroup) {
	if s.cfg.Rules != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := reload.Options{Log: s.log, Signals: []os.Signal{syscall.SIGHUP}, OnReload: s.countReload}
			if err := reload.Watch(ctx, s.cfg.Rules, s.engine, o); err != nil {
				s.log.Error("rules: cannot watch the rule file; edits will not be picked up", "file", s.cfg.Rules, "err", err)
			}
		}()
		// Pick up an edit made between New and the start of the watcher.
		if set, err := rules.Load(s.cfg.Rules); err == nil {
			s.engine.Swap(set)
			s.rec.RulesLoaded(set)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.reportHealth(ctx)
	}()
	s.startExchange(ctx, wg)
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.recordHistory(ctx)
	}()
}

// recordHistory adds a point a second to the recorder's history of
// decisions, which the status page's chart starts from, until ctx ends.
func (s *Server) recordHistory(ctx context.Context) {
	t := time.NewTicker(metrics.HistoryStep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.rec.RecordHistory()
		}
	}
}

// rulesName is the rule file, for the log, or "(built-in)".
func (s *Server) rulesName() string {
	if s.cfg.Rules == "" {
		return "(built-in)"
	}
	return s.cfg.Rules
}

// shutdown stops the listeners gracefully, then closes the store. It
// returns an error wrapping ErrUncleanShutdown when requests were cut at
// the shutdown timeout or unsynced counts could not be pushed.
func (s *Server) shutdown(servers []*http.Server) error {
	timeout := s.cfg.ShutdownTimeout
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s.health.Shutdown() // tell health checkers we are going away
	var wg sync.WaitGroup
	var httpCut, grpcCut atomic.Int64
	for _, hs := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Shutdown(ctx); err != nil {
				httpCut.Store(s.inflight.http.Load()) // every server shares one count
				hs.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			grpcCut.Store(s.inflight.grpc.Load())
			s.grpc.Stop()
		}
	}()
	wg.Wait()
	s.admission.Close()
	err := s.shutdownReport(timeout, httpCut.Load(), grpcCut.Load())
	if serr := s.closeStore(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("%w: %v", ErrUncleanShutdown, serr))
	}
	if err != nil {
		s.log.Error("stopped; shutdown was not clean", "err", err)
	} else {
		s.log.Info("stopped")
	}
	return err
}

// closeStore closes the distributed node (pushing unsynced counts) and the
// Redis client. It returns the node's error if counts could not be pushed.
func (s *Server) closeStore(ctx context.Context) error {
	var err error
	if s.node != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.ShutdownTimeout, time.Second))
		start := time.Now()
		if err = s.node.Close(cctx); err != nil {
			s.log.Error("closing the distributed node: counts lost", "err", err, "took", time.Since(start))
			err = fmt.Errorf("unsynced counts could not be pushed: %w", err)
		} else {
			s.log.Info("distributed node closed; unsynced counts pushed", "took", time.Since(start),
				"dropped_while_queue_full", s.node.Health().DroppedEvents)
		}
		cancel()
		s.node = nil
	}
	if s.redis != nil {
		s.redis.Close()
		s.redis = nil
	}
	s.closeRemotes()
	// Spans still buffered are exported last, store calls included.
	s.shutdownTracing(ctx)
	return err
}

// shutdownTracing exports the spans still buffered and stops the exporter,
// by ctx's deadline (shutdown's: what is left of shutdown_timeout), else
// within shutdown_timeout: a collector that accepts and never answers must
// not hold the process past it. Spans not exported by then are lost, and
// logged.
func (s *Server) shutdownTracing(ctx context.Context) {
	if s.tracing == nil {
		return
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.cfg.ShutdownTimeout)
	}
	tctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	if err := s.tracing.Shutdown(tctx); err != nil {
		s.log.Warn("tracing: spans could not be exported at shutdown", "err", err, "shutdown_timeout", s.cfg.ShutdownTimeout)
	}
	s.tracing = nil
}

func writeText(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(s))
}

// observed is the rule engine with every decision recorded in metrics.
type observed struct {
	engine  *rules.Engine
	rec     *metrics.Recorder
	tracing *tracing.Tracing // nil when tracing is off
	// unmatched logs requests no rule applied to; nil when the front end
	// logs them itself.
	unmatched *rulelog.Unmatched
	// warnings logs the keys that reach a rule's warning level.
	warnings *rulelog.Warnings
}

func (o *observed) Check(ctx context.Context, req rules.Request) (rules.Result, error) {
	if o.tracing != nil {
		ctx, span := o.tracing.StartDecision(ctx, req)
		res, err := o.check(ctx, req)
		tracing.EndDecision(span, res, err)
		return res, err
	}
	return o.check(ctx, req)
}

func (o *observed) check(ctx context.Context, req rules.Request) (rules.Result, error) {
	start := time.Now()
	res, err := o.engine.Check(ctx, req)
	if err != nil {
		o.rec.ObserveError(time.Since(start))
		return res, err
	}
	o.rec.Observe(res, time.Since(start))
	o.warnings.Record(res, "domain", req.Domain)
	if res.Unmatched != "" && o.unmatched != nil {
		o.unmatched.Record(req, res)
	}
	return res, nil
}

func (o *observed) Release(ctx context.Context, req rules.Request, lease string) (bool, error) {
	return o.engine.Release(ctx, req, lease)
}

func (o *observed) Set() *rules.Set { return o.engine.Set() }

// countReload counts a rule reload attempt in metrics, and the rules it
// put in force.
func (s *Server) countReload(r reload.Reload) {
	s.rec.RuleReload(r.Err == nil)
	if r.Set != nil {
		s.rec.RulesLoaded(r.Set)
	}
}

// streamWorkers is the number of gRPC stream workers: enough for 32 calls
// in flight per CPU the runtime uses.
func streamWorkers() int { return 32 * runtime.GOMAXPROCS(0) }
