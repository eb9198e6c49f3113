// Package fixedport picks loopback ports for servers that must be told
// their port before they start, and cannot listen on port 0 and report it:
// a reference implementation reading its port from the environment, a
// container given its ports.
//
// A port taken from the kernel's ephemeral range and released may be handed
// to any listener on port 0 or outgoing connection, in this test process or
// one beside it, before the server binds it. Free picks from the ports just
// below that range, which only another explicit choice can take.
package fixedport

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	mu   sync.Mutex
	next int // the next port Free tries
)

// Free returns a loopback TCP port below the ephemeral range that nothing
// listens on now and that Free has not returned lately in this process.
func Free(tb testing.TB) int {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	lo, hi := Range()
	if next < lo || next >= hi {
		next = lo + rand.IntN(hi-lo)
	}
	for range hi - lo {
		p := next
		if next++; next >= hi {
			next = lo
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	tb.Fatalf("fixedport: no free loopback port in [%d, %d)", lo, hi)
	return 0
}

// Range returns the ports Free picks from, [lo, hi): the 10,000 below the
// first ephemeral port (net.ipv4.ip_local_port_range; 32768 where it cannot
// be read), never below 1024.
func Range() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	hi = max(hi, 2048)
	return max(hi-10000, 1024), hi
}
