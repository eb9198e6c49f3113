package httprules

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/rules"
)

// A Source produces one descriptor entry from a request. Value returns the
// entry's value and whether the request has one; an entry without a value
// is left out of the descriptor.
type Source struct {
	// Key is the entry's key, as rules match it (ip, path, header:x-api-key).
	Key   string
	Value func(r *http.Request) (string, bool)
}

// IP is the entry {"ip", client address}, with the client address found as
// httplimit.Proxies.ClientIP describes (a nil p trusts no forwarding header).
func IP(p *httplimit.Proxies) Source {
	return Source{Key: "ip", Value: func(r *http.Request) (string, bool) {
		a := p.ClientIP(r)
		if !a.IsValid() {
			return "", false
		}
		return a.String(), true
	}}
}

// Path is the entry {"path", URL path}.
func Path() Source {
	return Source{Key: "path", Value: func(r *http.Request) (string, bool) { return r.URL.Path, true }}
}

// Method is the entry {"method", HTTP method}.
func Method() Source {
	return Source{Key: "method", Value: func(r *http.Request) (string, bool) { return r.Method, true }}
}

// Host is the entry {"host", Host header}.
func Host() Source {
	return Source{Key: "host", Value: func(r *http.Request) (string, bool) { return r.Host, r.Host != "" }}
}

// Header is the entry {"header:NAME", value} for the request header NAME
// (key in lower case), such as an API key: Header("X-API-Key"). Requests
// without the header get no entry.
func Header(name string) Source {
	key := "header:" + strings.ToLower(name)
	return Source{Key: key, Value: func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}}
}

// Func is an entry whose value f computes, e.g. a tenant taken from an
// authenticated session.
func Func(key string, f func(r *http.Request) (string, bool)) Source {
	return Source{Key: key, Value: f}
}

// ParseSource returns the source a configuration names: ip, path, method,
// host or header:NAME. Addresses are found with p.
func ParseSource(spec string, p *httplimit.Proxies) (Source, error) {
	switch spec {
	case "ip":
		return IP(p), nil
	case "path":
		return Path(), nil
	case "method":
		return Method(), nil
	case "host":
		return Host(), nil
	}
	if name, ok := strings.CutPrefix(spec, "header:"); ok && name != "" {
		return Header(name), nil
	}
	return Source{}, fmt.Errorf("descriptor source %q: want ip, path, method, host or header:<name>", spec)
}

// Describe builds one descriptor from the sources, in order.
func Describe(r *http.Request, sources []Source) rules.Descriptor {
	d := make(rules.Descriptor, 0, len(sources))
	for _, s := range sources {
		if v, ok := s.Value(r); ok {
			d = append(d, rules.Entry{Key: s.Key, Value: v})
		}
	}
	return d
}
