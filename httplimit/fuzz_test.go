package httplimit

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// FuzzClientIP feeds arbitrary peer addresses and X-Forwarded-For and
// Forwarded values to ClientIP behind a fixed set of trusted proxies. It
// checks that a header from an untrusted peer is never read, that the
// answer is the peer or an address the trusted chain vouched for, and that
// whatever a client writes into the header ahead of what its proxy appends
// never takes the place of the client's real address.
func FuzzClientIP(f *testing.F) {
	p, err := ParseProxies("10.0.0.0/8", "127.0.0.1", "fd00::/8")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("203.0.113.7:5000", "1.2.3.4", "for=1.2.3.4", "6.6.6.6")
	f.Add("10.1.2.3:80", "6.6.6.6, 198.51.100.9, 10.9.9.9", "", "10.0.0.9")
	f.Add("10.1.2.3:80", "", `for="[2001:db8::17]:4711";proto=https, for=10.0.0.5`, `for="`)
	f.Add("[fd00::1]:443", "2001:db8::1", "for=_hidden", `for="\`)
	f.Add("[::ffff:10.1.1.1]:80", "192.0.2.1", "for=unknown", "for=127.0.0.1, for=10.0.0.1")
	f.Add("127.0.0.1", "not-an-ip", `for="10.0.0.1";by=x, for="\"1.1.1.1\""`, `"`)
	f.Add("[fe80::1%eth0]:1", ",,,", ";;;", "for=[::1]")
	f.Add("", "[::1]:80, [2001:db8::1]", "FOR=1.2.3.4", "127.0.0.1:1234")

	client := netip.MustParseAddr("203.0.113.7")
	proxy := netip.MustParseAddr("10.0.0.1")

	f.Fuzz(func(t *testing.T, remote, xff, fwd, spoof string) {
		// Arbitrary request: untrusted peers are never overruled, and an
		// answer other than the peer needs a trusted peer.
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		peer := remoteAddr(remote)
		got := p.ClientIP(r)
		if !p.Trusted(peer) && got != peer {
			t.Fatalf("untrusted peer %q (%v) overruled by header: got %v (xff %q, fwd %q)", remote, peer, got, xff, fwd)
		}
		if got != peer && !got.IsValid() {
			t.Fatalf("invalid client address from trusted peer %v (xff %q, fwd %q)", peer, xff, fwd)
		}
		if got.Is4In6() {
			t.Fatalf("IPv4-mapped client address %v", got)
		}

		// The client writes spoof; a trusted proxy at 10.0.0.1 appends the
		// client's real address, as a new header line or on the same line.
		// The real address must win; on the same line a spoof may at worst
		// garble the appended entry so the walk stops at the proxy.
		for _, tc := range []struct {
			name  string
			lines []string
			same  bool
		}{
			{"X-Forwarded-For", []string{spoof, client.String()}, false},
			{"X-Forwarded-For", []string{spoof + ", " + client.String()}, true},
			{"Forwarded", []string{spoof, "for=" + client.String()}, false},
			{"Forwarded", []string{spoof + ", for=" + client.String()}, true},
		} {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = proxy.String() + ":443"
			for _, l := range tc.lines {
				r.Header.Add(tc.name, l)
			}
			got := p.ClientIP(r)
			if got == client {
				continue
			}
			// On a shared Forwarded line, a spoof with an open quote may
			// swallow the appended hop; the walk then stops at the proxy.
			if tc.same && tc.name == "Forwarded" && got == proxy && strings.Contains(spoof, `"`) {
				continue
			}
			t.Fatalf("%s %q from proxy %v: ClientIP = %v, want %v", tc.name, tc.lines, proxy, got, client)
		}
	})
}
