package server

import "testing"

func TestMaskKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"default|per-ip|ip=10.0.0.1", "default|per-ip|ip=10.0.0.1"},
		{"default|k|header:x-api-key=sk_live_1", "default|k|header:x-api-key=" + maskValue("sk_live_1")},
		{"d|r|client=acme|api_key=a\\|b\\=c", "d|r|client=acme|api_key=" + maskValue("a|b=c")},
		{"d|r|Session-Token==" + "ab12", "d|r|Session-Token=" + maskValue("=ab12")},
		{"d|=synthetic|x-auth=v|path=/a", "d|=synthetic|x-auth=" + maskValue("v") + "|path=/a"},
		{"d|global", "d|global"},
		{"", ""},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := maskKey(c.in); got != c.want {
				t.Errorf("maskKey(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestMaskMatch(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"header:x-api-key = k1", "header:x-api-key = " + maskValue("k1")},
		{"plan = pro, path prefix /loan/", "plan = " + maskValue("pro") + ", path prefix /loan/"},
		{"key one of (= a, = b): unlimited", "key one of (= " + maskValue("a") + ", = " + maskValue("b") + "): unlimited"},
		{"ip in 10.0.0.0/8", "ip in 10.0.0.0/8"},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := maskMatch(c.in); got != c.want {
				t.Errorf("maskMatch(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func TestScrubAddrs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"shared store does not answer: dial tcp 10.0.0.5:6379: connect: connection refused",
			"shared store does not answer: dial tcp [address]: connect: connection refused"},
		{"distributed: sync with redis://127.0.0.1:46853: redisstore: EOF", "distributed: sync with [store]: redisstore: EOF"},
		{"dial tcp: lookup redis.internal: no such host", "dial tcp: lookup [host]: no such host"},
		{"connecting to [::1]:6379 and redis-0.redis:26379: WRONGPASS", "connecting to [address] and [address]: WRONGPASS"},
		{"shared store unavailable (circuit breaker open): i/o timeout", "shared store unavailable (circuit breaker open): i/o timeout"},
	} {
		t.Run(c.in, func(t *testing.T) {
			if got := scrubAddrs(c.in); got != c.want {
				t.Errorf("scrubAddrs(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}
