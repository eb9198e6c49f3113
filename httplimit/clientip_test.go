package httplimit

import (
	"net/http/httptest"
	"testing"
)

func TestClientIP(t *testing.T) {
	p, err := ParseProxies("10.0.0.0/8", "127.0.0.1", "fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		remote string
		xff    []string
		fwd    []string
		want   string
	}{
		{"no header", "203.0.113.7:5000", nil, nil, "203.0.113.7"},
		{"spoofed XFF from untrusted peer is ignored", "203.0.113.7:5000", []string{"1.2.3.4"}, nil, "203.0.113.7"},
		{"spoofed Forwarded from untrusted peer is ignored", "203.0.113.7:5000", nil, []string{"for=1.2.3.4"}, "203.0.113.7"},
		{"trusted proxy, one hop", "10.1.2.3:80", []string{"198.51.100.9"}, nil, "198.51.100.9"},
		{"trusted chain, rightmost untrusted wins", "10.1.2.3:80", []string{"6.6.6.6, 198.51.100.9, 10.9.9.9"}, nil, "198.51.100.9"},
		{"several XFF header lines", "127.0.0.1:80", []string{"6.6.6.6", "198.51.100.9"}, nil, "198.51.100.9"},
		{"all hops trusted gives leftmost", "10.1.2.3:80", []string{"10.5.5.5, 10.9.9.9"}, nil, "10.5.5.5"},
		{"garbage hop stops at last trusted", "10.1.2.3:80", []string{"not-an-ip"}, nil, "10.1.2.3"},
		{"Forwarded with IPv6 and port", "10.1.2.3:80", nil, []string{`for="[2001:db8::17]:4711";proto=https, for=10.0.0.5`}, "2001:db8::17"},
		{"Forwarded preferred over XFF", "10.1.2.3:80", []string{"6.6.6.6"}, []string{"for=192.0.2.60;by=10.0.0.1"}, "192.0.2.60"},
		{"Forwarded obfuscated stops", "10.1.2.3:80", nil, []string{"for=_hidden"}, "10.1.2.3"},
		{"IPv6 trusted peer", "[fd00::1]:443", []string{"2001:db8::1"}, nil, "2001:db8::1"},
		{"IPv4-mapped peer", "[::ffff:10.1.1.1]:80", []string{"192.0.2.1"}, nil, "192.0.2.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range c.fwd {
				r.Header.Add("Forwarded", v)
			}
			if got := p.ClientIP(r).String(); got != c.want {
				t.Errorf("%s: ClientIP = %s, want %s", c.name, got, c.want)
			}
		})
	}
}

func TestNoTrustedProxies(t *testing.T) {
	var p *Proxies
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:1234"
	r.Header.Set("X-Forwarded-For", "1.2.3.4")
	if got := p.ClientIP(r).String(); got != "127.0.0.1" {
		t.Fatalf("nil Proxies trusted a header: got %s", got)
	}
}

func TestParseProxiesErrors(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "nonsense", "1.2.3"} {
		t.Run(bad, func(t *testing.T) {
			if _, err := ParseProxies(bad); err == nil {
				t.Errorf("ParseProxies(%q) succeeded", bad)
			}
		})
	}
}
