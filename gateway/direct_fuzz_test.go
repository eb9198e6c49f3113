package gateway

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
)

// FuzzRequestURIMatchesReverseProxy: the direct forwarder's request target
// is the one httputil.ProxyRequest.SetURL would send, for any upstream
// path and query and any request target the server accepts.
func FuzzRequestURIMatchesReverseProxy(f *testing.F) {
	for _, s := range [][2]string{
		{"http://up", "/x?q=1"},
		{"http://up/base", "/x"},
		{"http://up/base/", "/x/y?a=b&c"},
		{"http://up/a%2Fb?k=v", "/p%2Fq?z=1"},
		{"http://up/?only=query", "/"},
		{"http://up/base", "/caf%C3%A9/%20x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, upstream, target string) {
		up, err := url.Parse(upstream)
		if err != nil || up.Scheme != "http" || up.Host == "" || up.Opaque != "" || up.User != nil || up.Fragment != "" {
			return
		}
		in, err := http.NewRequest("GET", "http://front"+target, nil)
		if err != nil || in.URL.Host != "front" || in.URL.Fragment != "" || len(target) == 0 || target[0] != '/' {
			return
		}
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		pr.SetURL(up)
		rt := &route{up: up}
		if got, want := rt.requestURI(in.URL), pr.Out.URL.RequestURI(); got != want {
			t.Fatalf("upstream %q, target %q: direct sends %q, ReverseProxy %q", upstream, target, got, want)
		}
	})
}
