package fixedport

import (
	"net"
	"strconv"
	"testing"
)

// Free's ports lie below the ephemeral range, differ from each other, and
// can be bound; a port held by a listener is skipped.
func TestFree(t *testing.T) {
	lo, hi := Range()
	held, err := net.Listen("tcp", "127.0.0.1:0") // an ephemeral port, held
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if p := held.Addr().(*net.TCPAddr).Port; p >= lo && p < hi {
		t.Fatalf("the kernel's port %d lies in Free's range [%d, %d)", p, lo, hi)
	}
	seen := map[int]bool{}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range 50 {
		p := Free(t)
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("port %d: outside [%d, %d) or given twice", p, lo, hi)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d cannot be bound: %v", p, err)
		}
		lns = append(lns, ln) // held: Free must step over it
	}
}
