package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies is a list of trusted reverse proxies, by address range. The
// client address a request reports in X-Forwarded-For or Forwarded is
// believed only when the connection comes from one of them; a header sent
// by anyone else is ignored, so a client cannot choose its own address.
//
// The zero value trusts nobody: ClientIP then always returns the peer
// address.
type Proxies struct {
	prefixes []netip.Prefix
}

// ParseProxies parses trusted-proxy ranges in CIDR notation ("10.0.0.0/8",
// "::1/128") or as single addresses ("127.0.0.1").
func ParseProxies(cidrs ...string) (*Proxies, error) {
	p := &Proxies{}
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if strings.Contains(c, "/") {
			pr, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: not a CIDR range such as 10.0.0.0/8: %v", c, err)
			}
			p.prefixes = append(p.prefixes, pr.Masked())
			continue
		}
		a, err := netip.ParseAddr(c)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: not an address or CIDR range: %v", c, err)
		}
		a = a.Unmap()
		p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return p, nil
}

// Trusted reports whether addr is in one of the trusted ranges.
func (p *Proxies) Trusted(addr netip.Addr) bool {
	if p == nil || !addr.IsValid() {
		return false
	}
	addr = addr.Unmap()
	for _, pr := range p.prefixes {
		if pr.Contains(addr) {
			return true
		}
	}
	return false
}

// ClientIP returns the address of the client that sent r.
//
// It starts from the connection's peer (r.RemoteAddr). While that address is
// a trusted proxy, it steps back one hop through the forwarding header: the
// Forwarded header (RFC 7239) if the request has one, X-Forwarded-For
// otherwise, read from the right. The first address that is not a trusted
// proxy is the client. Entries a trusted proxy could not have written (an
// obfuscated or malformed "for" value) stop the walk at the last trusted hop.
// A header from an untrusted peer is never read.
func (p *Proxies) ClientIP(r *http.Request) netip.Addr {
	peer := remoteAddr(r.RemoteAddr)
	if !p.Trusted(peer) {
		return peer
	}
	var hops []string
	if fw := r.Header.Values("Forwarded"); len(fw) > 0 {
		hops = forwardedFor(fw)
	} else {
		for _, v := range r.Header.Values("X-Forwarded-For") {
			for _, h := range strings.Split(v, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break
		}
		client = a
		if !p.Trusted(a) {
			break
		}
	}
	return client
}

// remoteAddr parses a RemoteAddr of the form host:port (or a bare host).
func remoteAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// parseHop parses one forwarding hop: an address with or without a port,
// IPv6 optionally in brackets.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// forwardedFor extracts the "for" parameter of every element of the
// Forwarded header values, in order. An element without "for" yields an
// empty hop, which stops the walk.
func forwardedFor(values []string) []string {
	var hops []string
	for _, v := range values {
		for _, elem := range splitQuoted(v, ',') {
			hop := ""
			for _, pair := range splitQuoted(elem, ';') {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
					continue
				}
				val = strings.TrimSpace(val)
				if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
					val = strings.ReplaceAll(val[1:len(val)-1], `\`, "")
				}
				hop = val
			}
			hops = append(hops, hop)
		}
	}
	return hops
}

// splitQuoted splits s at sep outside double-quoted strings.
func splitQuoted(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && quoted:
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
