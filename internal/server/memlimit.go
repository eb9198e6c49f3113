package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/distributed"
)

// Sizing memory from a container's limit L (docs/operations.md, "Memory
// bounds and key floods"): the Go runtime's limit is 90% of L, the rest of
// the server gets min(256 MiB, L/4) of that, and the store (or a node's
// table and queue) the remainder divided by 1.5, the garbage and allocator
// slack a store's bytes cost on top of themselves.
const (
	defaultStoreMaxBytes = 1 << 30   // the memory store's bound outside a container
	serverOverhead       = 256 << 20 // the rest of the server, at most
	minStoreMaxBytes     = 16 << 20  // the least a store is given
)

// MemoryPlan is how serve sizes memory: the bounds it derived and the Go
// runtime memory limit (GOMEMLIMIT) it sets when the environment does not.
type MemoryPlan struct {
	// Container is the container's memory limit, 0 when there is none.
	Container int64
	// GoLimit is the Go runtime memory limit to set; 0 for none.
	GoLimit int64
	// Derived reports that the store's bounds came from Container because
	// the configuration left them at 0.
	Derived bool
}

// FitMemory fills the store's bounds in bytes that c leaves at 0 (the
// memory store's max_bytes; a node's arrangement.max_bytes and
// max_pending_bytes when both are 0) from container, the container's
// memory limit in bytes (0: none; ContainerMemoryLimit reads it), and
// returns the plan with the Go runtime limit that suits them. Bounds the
// configuration sets are kept; the Go limit then never passes 90% of the
// container's. Calling it again changes nothing.
func (c *Config) FitMemory(container int64) MemoryPlan {
	p := MemoryPlan{Container: container}
	budget := int64(0) // bytes for the store, from the container
	if container > 0 {
		p.GoLimit = container - container/10
		budget = max((p.GoLimit-min(serverOverhead, container/4))*2/3, minStoreMaxBytes)
	}
	switch {
	case c.Store.Type == StoreMemory || c.Store.Type == "":
		if c.Store.MaxBytes == 0 {
			c.Store.MaxBytes, p.Derived = defaultStoreMaxBytes, container > 0
			if container > 0 {
				c.Store.MaxBytes = budget
			}
		}
	default:
		if container > 0 && c.Arrangement.MaxBytes == 0 && c.Arrangement.MaxPendingBytes == 0 {
			// The defaults' proportions: 512 MiB of table to 64 MiB of queue.
			c.Arrangement.MaxBytes = min(budget*8/9, distributed.DefaultMaxBytes)
			c.Arrangement.MaxPendingBytes = min(budget/9, distributed.DefaultMaxPendingBytes)
			p.Derived = true
		}
	}
	// Derived bounds were sized for 90% of the container; bounds the
	// configuration sets get their own limit, capped there.
	if !p.Derived {
		want := c.Store.MemoryLimit()
		if c.Store.Type != StoreMemory && c.Store.Type != "" {
			want = c.ArrangementMemoryLimit()
		}
		p.GoLimit = capLimit(want, p.GoLimit)
	}
	return p
}

// capLimit is want, but no more than ceiling when there is one.
func capLimit(want, ceiling int64) int64 {
	if ceiling > 0 && (want == 0 || want > ceiling) {
		return ceiling
	}
	return want
}

// ContainerMemoryLimit returns the memory limit of the cgroup the process
// runs in: cgroup v2's memory.max, else cgroup v1's
// memory.limit_in_bytes; 0 when there is none (or it is "max").
func ContainerMemoryLimit() int64 { return cgroupMemoryLimit("/sys/fs/cgroup") }

// cgroupMemoryLimit reads the limit under the cgroup file system at root.
func cgroupMemoryLimit(root string) int64 {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		n, err := strconv.ParseInt(s, 10, 64)
		// cgroup v1 writes "no limit" as a huge number near 2^63.
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0
		}
		return n
	}
	return 0
}
