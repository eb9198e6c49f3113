// Package gateway is a rate-limiting reverse proxy: it routes each request
// by path prefix to an upstream service and applies the rules before
// forwarding, so one placement in front of several services limits them
// all — for the requests that pass through it (docs/simulator.md,
// "floodgate sim coverage").
//
// Each route keeps its own bounded pool of upstream connections
// (Transport). Requests without a body to a plain-HTTP upstream are
// forwarded on it directly from the handler (direct.go); the rest — request
// bodies, upgrades such as WebSocket, https upstreams — go through
// httputil.ReverseProxy. Streamed responses are flushed as they arrive and
// hop-by-hop headers stop at the gateway either way.
package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/ratelog"
	"github.com/floodgate-dev/floodgate/internal/urlpath"
)

// Route sends requests whose URL path starts with Prefix to Upstream. The
// upstream URL's path, if any, is put in front of the request's path.
type Route struct {
	Prefix   string
	Upstream *url.URL
	// Transport tunes the route's own pool of upstream connections; the
	// zero value takes the defaults. Ignored when Options.Transport is set.
	Transport Transport
	// Path says how the route's paths are made canonical; the zero value
	// takes the safe defaults.
	Path PathPolicy
}

// PathPolicy says how a route treats the spellings of a path its upstream
// may read as one. Whatever the policy, the gateway removes dot segments
// (also when written %2e), merges repeated slashes and decodes escapes of
// unreserved characters; the rules see the path that results and the
// upstream is sent that same path, or the request is refused with 400. An
// empty field takes its default, shown first.
type PathPolicy struct {
	// EncodedSlash: "refuse" a path with %2F, or "decode" it as '/'.
	EncodedSlash string
	// Semicolon: "refuse" a path with ';' (or %3B), "strip" each
	// segment's ;parameters as servlet containers do, or "keep" ';' as an
	// ordinary character.
	Semicolon string
	// Case: "sensitive", or "lower" to turn ASCII letters to lower case
	// for an upstream that ignores case.
	Case string
	// TrailingSlash: "keep" it, or "strip" it for an upstream that serves
	// /a/ as /a.
	TrailingSlash string
	// Compatibility: "refuse" a path holding a character Unicode
	// compatibility normalization (NFKC) turns into ASCII (full-width
	// letters and the like), or "keep" it for an upstream that does not
	// normalise.
	Compatibility string
}

// Options configures a Gateway.
type Options struct {
	// Routes are matched by longest prefix.
	Routes []Route
	// Limit wraps the proxy: every request goes through it before it is
	// routed (typically httprules.Middleware). Nil forwards everything.
	Limit func(http.Handler) http.Handler
	// Transport, when set, sends every route's requests upstream instead of
	// the route's own pooled transport (its connections are not counted).
	Transport http.RoundTripper
	// Logger receives upstream errors; nil means slog.Default().
	Logger *slog.Logger
	// noDirect sends every request through httputil.ReverseProxy and the
	// route's http.Transport, instead of sending bodiless requests to a
	// plain-HTTP upstream on the gateway's own pooled HTTP/1.1 connections;
	// the package's tests compare the two (see direct.go).
	noDirect bool
	// Proxies are the trusted proxies in front of the gateway. When a
	// request comes from one, its X-Forwarded-For chain is passed on with
	// the peer appended; from anyone else the chain is dropped and the
	// upstream sees only the peer's address. Nil trusts nobody.
	Proxies *httplimit.Proxies
}

// Gateway is an http.Handler that limits and forwards requests.
type Gateway struct {
	routes  []*route
	handler http.Handler
	log     *slog.Logger
	buffers *bufferPool
	// policies are the routes' distinct path policies; route.policy
	// indexes it. With one, a path is made canonical once.
	policies []urlpath.Policy
}

// hostPort is u's host with the scheme's default port when it has none.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

type route struct {
	prefix   string
	policy   int // index in Gateway.policies
	upstream string
	up       *url.URL
	proxy    *httputil.ReverseProxy
	conns    *connCounter
	tr       *http.Transport // nil when Options.Transport is used
	// pool, for a plain-HTTP upstream with the route's own transport,
	// serves the direct forwarder (direct.go).
	pool          *pool
	headerTimeout time.Duration
	proxies       *httplimit.Proxies
	buffers       *bufferPool
	log           *slog.Logger
	// failures spaces out the log records of failed upstream requests;
	// failed and canceled count them and the requests whose client went
	// away first.
	failures         *ratelog.Every
	failed, canceled atomic.Uint64
}

// FailureLogInterval is the least time between two log records of one
// route's upstream failures; each record says how many failures it stands
// for.
const FailureLogInterval = 10 * time.Second

// statusClientClosedRequest is the status, for the access log, of a
// request whose client went away before the upstream answered (nginx's
// 499); the client never sees it.
const statusClientClosedRequest = 499

// New returns a gateway for o, or an error if a route is malformed.
func New(o Options) (*Gateway, error) {
	if len(o.Routes) == 0 {
		return nil, errors.New("gateway: no routes")
	}
	g := &Gateway{log: o.Logger, buffers: &bufferPool{}}
	if g.log == nil {
		g.log = slog.Default()
	}
	seen := map[string]bool{}
	for _, r := range o.Routes {
		if !strings.HasPrefix(r.Prefix, "/") {
			return nil, fmt.Errorf("gateway: route prefix %q must start with /", r.Prefix)
		}
		if r.Upstream == nil || (r.Upstream.Scheme != "http" && r.Upstream.Scheme != "https") || r.Upstream.Host == "" {
			return nil, fmt.Errorf("gateway: route %s: upstream must be an absolute http or https URL", r.Prefix)
		}
		if seen[r.Prefix] {
			return nil, fmt.Errorf("gateway: route prefix %q appears twice", r.Prefix)
		}
		seen[r.Prefix] = true
		pp, err := urlpath.ParsePolicy(r.Path.EncodedSlash, r.Path.Semicolon, r.Path.Case, r.Path.TrailingSlash, r.Path.Compatibility)
		if err != nil {
			return nil, fmt.Errorf("gateway: route %s: path: %v", r.Prefix, err)
		}
		if _, canon, err := urlpath.Canonical(r.Prefix, pp); err != nil || canon != r.Prefix && canon != strings.TrimSuffix(r.Prefix, "/") {
			return nil, fmt.Errorf("gateway: route prefix %q is not a canonical path under its path policy (no dot segments, "+
				"repeated slashes or escapes of letters and digits; lower case when case is lower)", r.Prefix)
		}
		rt := g.newRoute(r, o)
		rt.policy = slices.Index(g.policies, pp)
		if rt.policy < 0 {
			rt.policy = len(g.policies)
			g.policies = append(g.policies, pp)
		}
		g.routes = append(g.routes, rt)
	}
	sort.Slice(g.routes, func(i, j int) bool { return len(g.routes[i].prefix) > len(g.routes[j].prefix) })
	var h http.Handler = http.HandlerFunc(g.forward)
	if o.Limit != nil {
		h = o.Limit(h)
	}
	g.handler = h
	return g, nil
}

// newRoute builds the reverse proxy of r.
func (g *Gateway) newRoute(r Route, o Options) *route {
	up, prefix := r.Upstream, r.Prefix
	rt := &route{prefix: prefix, upstream: up.String(), up: up, conns: &connCounter{}, proxies: o.Proxies, buffers: g.buffers,
		headerTimeout: orDefault(r.Transport.ResponseHeaderTimeout, DefaultResponseHeaderTimeout),
		log:           g.log, failures: ratelog.New(FailureLogInterval)}
	transport := o.Transport
	if transport == nil {
		rt.tr = newTransport(r.Transport, rt.conns)
		transport = rt.tr
		if up.Scheme == "http" && !o.noDirect {
			rt.pool = newPool(hostPort(up), r.Transport, rt.conns)
		}
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			if xff := pr.In.Header.Values("X-Forwarded-For"); len(xff) > 0 && o.Proxies.Trusted(peer(pr.In)) {
				pr.Out.Header["X-Forwarded-For"] = xff
			}
			pr.SetXForwarded()
			pr.Out.Host = up.Host
			addVia(pr.Out.Header, pr.In)
		},
		Transport:    transport,
		BufferPool:   g.buffers,
		ErrorHandler: rt.fail,
	}
	return rt
}

// fail answers a request the upstream did not answer. When the client went
// away first it is counted as a cancel and not logged: the upstream did
// nothing wrong. Otherwise it is an upstream failure, counted, logged at
// most once per FailureLogInterval per route with the number of failures
// since the previous record, and answered 502.
func (rt *route) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		rt.canceled.Add(1)
		w.WriteHeader(statusClientClosedRequest)
		return
	}
	rt.failed.Add(1)
	if n, due := rt.failures.Add(); due {
		rt.log.Warn("gateway: upstream failed", "route", rt.prefix, "upstream", rt.upstream, "err", err,
			"failures_since_last_record", n)
	}
	writeError(w, http.StatusBadGateway, "upstream for "+rt.prefix+" failed")
}

// addVia appends the gateway to the request's Via header, as RFC 9110
// section 7.6.3 asks of a gateway forwarding a request.
func addVia(h http.Header, in *http.Request) {
	via := viaToken(in)
	if prior := h["Via"]; len(prior) > 0 {
		h["Via"] = append(prior[:len(prior):len(prior)], via)
		return
	}
	h["Via"] = []string{via}
}

// Upstreams returns each route's upstream connection counts, in route
// order (longest prefix first).
func (g *Gateway) Upstreams() []UpstreamStats {
	out := make([]UpstreamStats, len(g.routes))
	for i, rt := range g.routes {
		out[i] = UpstreamStats{Prefix: rt.prefix, Upstream: rt.upstream, Opened: rt.conns.opened.Load(), Open: rt.conns.open.Load(),
			Failed: rt.failed.Load(), Canceled: rt.canceled.Load()}
	}
	return out
}

// CloseIdleConnections closes the idle upstream connections of every route.
func (g *Gateway) CloseIdleConnections() {
	for _, rt := range g.routes {
		if rt.tr != nil {
			rt.tr.CloseIdleConnections()
		}
		if rt.pool != nil {
			rt.pool.closeIdle()
		}
	}
}

// ServeHTTP makes r's path canonical, limits r on that path and forwards
// it, on that same path, to its route's upstream. A path the gateway
// cannot give one meaning is answered 400, and CONNECT (which has no path)
// 405, without being limited or forwarded.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		writeError(w, http.StatusMethodNotAllowed, "the gateway does not tunnel CONNECT")
		return
	}
	sent := r.URL.EscapedPath()
	esc, dec, err := g.canonical(sent)
	if err != nil {
		writeError(w, http.StatusBadRequest, "ambiguous path: "+err.Error())
		return
	}
	if esc != sent || dec != r.URL.Path {
		r = withPath(r, esc, dec)
	}
	g.handler.ServeHTTP(w, r)
}

// canonical returns the canonical spelling of the escaped path, escaped
// and decoded, under the policy of the route it takes. With several
// policies, each route is tried longest prefix first under its own; the
// path must then also take that route as spelled canonically, or it is
// ambiguous.
func (g *Gateway) canonical(escaped string) (esc, dec string, err error) {
	if len(g.policies) == 1 {
		return urlpath.Canonical(escaped, g.policies[0])
	}
	type result struct {
		esc, dec string
		err      error
		done     bool
	}
	results := make([]result, len(g.policies))
	canon := func(i int) result {
		if !results[i].done {
			e, d, err := urlpath.Canonical(escaped, g.policies[i])
			results[i] = result{e, d, err, true}
		}
		return results[i]
	}
	// lenient is the path under the most accepting policy: a route whose
	// own policy refuses the path is the path's route when lenient takes
	// it, and the path is then refused.
	_, lenient, lerr := urlpath.Canonical(escaped, urlpath.Policy{EncodedSlash: urlpath.DecodeEncodedSlash, Semicolon: urlpath.KeepSemicolon,
		Compatibility: urlpath.KeepCompatibility})
	if lerr != nil {
		return "", "", lerr
	}
	for _, rt := range g.routes {
		res := canon(rt.policy)
		if res.err != nil {
			l := lenient
			if g.policies[rt.policy].Case == urlpath.LowerCase {
				l = strings.ToLower(l)
			}
			if strings.HasPrefix(l, rt.prefix) {
				return "", "", res.err
			}
			continue
		}
		if !strings.HasPrefix(res.dec, rt.prefix) {
			continue
		}
		if other := g.route(res.dec); other != rt {
			return "", "", fmt.Errorf("path %q takes route %s under that route's path policy, but route %s as spelled", res.esc, rt.prefix, other.prefix)
		}
		return res.esc, res.dec, nil
	}
	// No route takes it: the first policy's spelling is limited, then 404.
	res := canon(0)
	return res.esc, res.dec, res.err
}

// withPath returns a shallow copy of r whose URL has the path esc
// (escaped) and dec (decoded), as http.StripPrefix rewrites a path.
func withPath(r *http.Request, esc, dec string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := new(url.URL)
	*u = *r.URL
	u.Path, u.RawPath = dec, ""
	if esc != dec {
		u.RawPath = esc
	}
	r2.URL = u
	r2.RequestURI = u.RequestURI()
	return r2
}

// route returns the route path takes by its prefix, or nil.
func (g *Gateway) route(path string) *route {
	for _, rt := range g.routes {
		if strings.HasPrefix(path, rt.prefix) {
			return rt
		}
	}
	return nil
}

func (g *Gateway) forward(w http.ResponseWriter, r *http.Request) {
	rt := g.route(r.URL.Path)
	switch {
	case rt == nil:
		writeError(w, http.StatusNotFound, "no route for "+r.URL.Path)
	case rt.pool != nil && canDirect(r):
		rt.forwardDirect(w, r)
	default:
		rt.proxy.ServeHTTP(w, r)
	}
}

// peer returns the address of the connection r came on.
func peer(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
