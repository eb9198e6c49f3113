package server

import (
	"strings"
	"testing"
	"time"
)

// TestArrangementBoundsConfig reads the arrangement's bounds and the
// adaptive deadline's ceiling, and rejects negative ones.
func TestArrangementBoundsConfig(t *testing.T) {
	c, err := ParseConfig("f.yaml", []byte("arrangement:\n  max_deadline: 100ms\n  max_keys: 1000\n  max_bytes: 1048576\n  max_pending_bytes: 65536\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Arrangement
	if a.MaxDeadline != 100*time.Millisecond || a.MaxKeys != 1000 || a.MaxBytes != 1<<20 || a.MaxPendingBytes != 1<<16 {
		t.Fatalf("arrangement %+v", a)
	}
	if d := DefaultConfig().Arrangement; d.MaxDeadline != 250*time.Millisecond || d.MaxKeys != 0 || d.MaxPendingBytes != 0 {
		t.Fatalf("defaults %+v", d)
	}
	for _, bad := range []string{"max_keys: -1", "max_bytes: -5", "max_pending_bytes: -1", "max_deadline: -1s"} {
		_, err := ParseConfig("f.yaml", []byte("arrangement:\n  "+bad+"\n"))
		if err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("%s: got %v, want an error saying it must not be negative", bad, err)
		}
	}
}
