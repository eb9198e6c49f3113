package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// The direct forwarder sends a bodiless request to a plain-HTTP upstream
// over a pooled HTTP/1.1 connection from the handler's own goroutine,
// instead of through net/http's Transport (which hands each request to a
// writer goroutine and each response back from a reader goroutine), so
// the gateway, limiting included, spends less CPU per request than a bare
// httputil.ReverseProxy that limits nothing (BENCHMARKS.md, "Gateway").
// Everything else — request bodies (sent while the response may already
// be arriving), upgrades, Expect, https upstreams — goes through
// httputil.ReverseProxy.

// canDirect reports whether r can take the direct forwarder.
func canDirect(r *http.Request) bool {
	return (r.Body == nil || r.Body == http.NoBody) && r.ContentLength <= 0 &&
		len(r.Header["Upgrade"]) == 0 && len(r.Header["Expect"]) == 0 && len(r.Header["Transfer-Encoding"]) == 0 &&
		!strings.Contains(r.URL.RawQuery, ";")
}

// hopHeaders are the hop-by-hop headers of RFC 9110 section 7.6.1 and
// their historical companions, as httputil.ReverseProxy drops them.
var hopHeaders = map[string]bool{
	"Connection":          true,
	"Proxy-Connection":    true,
	"Keep-Alive":          true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// forwardedHeaders are set by the gateway itself on the request, as
// httputil.ProxyRequest.SetXForwarded does.
var forwardedHeaders = map[string]bool{"X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true}

// connectionNamed reports whether h's Connection header names key.
func connectionNamed(conn []string, key string) bool {
	for _, v := range conn {
		for f := range strings.SplitSeq(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(f)) == key {
				return true
			}
		}
	}
	return false
}

// forwardDirect forwards r, retrying once on a fresh connection when a
// reused one turns out to have been closed by the upstream while idle and
// the request may safely be sent again.
func (rt *route) forwardDirect(w http.ResponseWriter, r *http.Request) {
	for attempt := 0; ; attempt++ {
		c, err := rt.pool.get(r.Context())
		if err == nil {
			err = rt.exchange(w, r, c)
		}
		switch {
		case err == nil:
			return
		case errors.Is(err, errRetryable) && attempt == 0 && idempotent(r):
			continue
		case errors.Is(err, http.ErrAbortHandler):
			panic(http.ErrAbortHandler) // the response was cut off after its headers
		}
		rt.fail(w, r, err)
		return
	}
}

func idempotent(r *http.Request) bool {
	switch r.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
}

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

// exchange sends r on c and copies the response to w. c goes back to the
// pool when the exchange ended cleanly, and is closed otherwise.
func (rt *route) exchange(w http.ResponseWriter, r *http.Request, c *upConn) (err error) {
	ctx := r.Context()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	reuse := false
	defer func() {
		if stop() && reuse {
			rt.pool.put(c)
		} else {
			rt.pool.close(c)
		}
	}()
	rt.writeRequest(c, r)
	if err := c.bw.Flush(); err != nil {
		return rt.retryable(c, err)
	}
	resp, err := rt.readResponse(c, r)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	h := w.Header()
	conn := resp.Header["Connection"]
	for k, vv := range resp.Header {
		if hopHeaders[k] || len(conn) > 0 && connectionNamed(conn, k) {
			continue
		}
		h[k] = append(h[k], vv...)
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	w.WriteHeader(resp.StatusCode)
	if err := rt.copyBody(w, resp); err != nil {
		return err
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	reuse = !resp.Close
	return nil
}

// readResponse reads the response headers within the route's response
// header timeout, skipping informational (1xx) responses.
func (rt *route) readResponse(c *upConn, r *http.Request) (*http.Response, error) {
	if rt.headerTimeout > 0 {
		setReadDeadline(c, r.Context(), time.Now().Add(rt.headerTimeout))
	}
	c.headerBudget = maxResponseHeaderBytes
	defer func() { c.headerBudget = -1 }()
	// Nothing of the response has arrived when this fails: a reused
	// connection closed by the upstream may be retried.
	if _, err := c.br.Peek(1); err != nil {
		return nil, rt.retryable(c, err)
	}
	for {
		resp, err := http.ReadResponse(c.br, r)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 {
			// The body is read without a deadline, unless it is already
			// buffered whole (the next request sets a deadline anew).
			if rt.headerTimeout > 0 && (resp.ContentLength < 0 || int64(c.br.Buffered()) < resp.ContentLength) {
				setReadDeadline(c, r.Context(), time.Time{})
			}
			return resp, nil
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, errors.New("upstream switched protocols on a request that asked for no upgrade")
		}
	}
}

// setReadDeadline sets c's read deadline to t, unless ctx is done by
// then: the deadline in the past that exchange's AfterFunc set when ctx
// ended then stays, so a client's cancel cannot be lost to a deadline set
// just after it (the request would wait out the header timeout).
func setReadDeadline(c *upConn, ctx context.Context, t time.Time) {
	c.SetReadDeadline(t)
	if ctx.Err() != nil {
		c.SetReadDeadline(aLongTimeAgo)
	}
}

// retryable marks err as safe to retry when c was reused and the failure
// looks like the upstream having closed it while it sat idle.
func (rt *route) retryable(c *upConn, err error) error {
	if c.reused && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return errors.Join(errRetryable, err)
	}
	return err
}

// copyBody copies the response body to w, flushing after every write when
// the response is streamed (server-sent events, or no declared length), as
// httputil.ReverseProxy does. A failure after the headers were sent
// returns http.ErrAbortHandler so the client sees the response cut off.
func (rt *route) copyBody(w http.ResponseWriter, resp *http.Response) error {
	if resp.Body == http.NoBody {
		return nil
	}
	defer resp.Body.Close()
	flush := resp.ContentLength == -1 || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	buf := rt.buffers.Get()
	defer rt.buffers.Put(buf)
	rc := http.NewResponseController(w)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return http.ErrAbortHandler
			}
			if flush {
				rc.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return http.ErrAbortHandler
		}
	}
}

// writeRequest writes r's request line and headers, rewritten for the
// upstream as the ReverseProxy path rewrites them, to c's buffer.
func (rt *route) writeRequest(c *upConn, r *http.Request) {
	bw := c.bw
	bw.WriteString(r.Method)
	bw.WriteByte(' ')
	bw.WriteString(rt.requestURI(r.URL))
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(rt.up.Host)
	bw.WriteString("\r\n")
	conn := r.Header["Connection"]
	for k, vv := range r.Header {
		if hopHeaders[k] || forwardedHeaders[k] || k == "Via" || k == "Content-Length" || len(conn) > 0 && connectionNamed(conn, k) {
			if k == "Te" && teTrailers(vv) {
				bw.WriteString("Te: trailers\r\n")
			}
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("X-Forwarded-For: ")
	if xff := r.Header["X-Forwarded-For"]; len(xff) > 0 && rt.proxies.Trusted(peer(r)) {
		bw.WriteString(strings.Join(xff, ", "))
		bw.WriteString(", ")
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		bw.WriteString(host)
	}
	bw.WriteString("\r\nX-Forwarded-Host: ")
	bw.WriteString(r.Host)
	if r.TLS != nil {
		bw.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		bw.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
	// As http.Transport does: the body is empty, and methods that expect
	// one say so.
	switch r.Method {
	case "POST", "PUT", "PATCH":
		bw.WriteString("Content-Length: 0\r\n")
	}
	for _, v := range r.Header["Via"] {
		bw.WriteString("Via: ")
		bw.WriteString(v)
		bw.WriteString("\r\n")
	}
	bw.WriteString("Via: ")
	bw.WriteString(viaToken(r))
	bw.WriteString("\r\n\r\n")
}

func teTrailers(vv []string) bool {
	for _, v := range vv {
		if strings.Contains(v, "trailers") {
			return true
		}
	}
	return false
}

func viaToken(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "2 floodgate"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0 floodgate"
	}
	return "1.1 floodgate"
}

// requestURI is the request target for the upstream: the upstream URL's
// path joined with the request's, and both queries.
func (rt *route) requestURI(u *url.URL) string {
	if rt.up.Path == "" && rt.up.RawQuery == "" {
		return u.RequestURI()
	}
	out := *u
	out.Path, out.RawPath = joinURLPath(rt.up, u)
	switch {
	case rt.up.RawQuery == "":
	case out.RawQuery == "":
		out.RawQuery = rt.up.RawQuery
	default:
		out.RawQuery = rt.up.RawQuery + "&" + out.RawQuery
	}
	return out.RequestURI()
}

// joinURLPath joins a's and b's paths with one slash between them, as
// httputil.ProxyRequest.SetURL does.
func joinURLPath(a, b *url.URL) (path, rawpath string) {
	if a.RawPath == "" && b.RawPath == "" {
		return singleJoiningSlash(a.Path, b.Path), ""
	}
	apath, bpath := a.EscapedPath(), b.EscapedPath()
	aslash, bslash := strings.HasSuffix(apath, "/"), strings.HasPrefix(bpath, "/")
	switch {
	case aslash && bslash:
		return a.Path + b.Path[1:], apath + bpath[1:]
	case !aslash && !bslash:
		return a.Path + "/" + b.Path, apath + "/" + bpath
	}
	return a.Path + b.Path, apath + bpath
}

func singleJoiningSlash(a, b string) string {
	aslash, bslash := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash:
		return a + "/" + b
	}
	return a + b
}
