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
// runs in, in bytes, and the cgroup file it came from: the least limit of
// the process's own cgroup (/proc/self/cgroup) and its ancestors, as far up
// as the cgroup file system is mounted (/proc/self/mountinfo). It reads
// cgroup v1's memory.limit_in_bytes when the memory controller is on a v1
// hierarchy, else cgroup v2's memory.max; 0 and "" when there is no limit
// ("max", or v1's number near 2^63).
func ContainerMemoryLimit() (bytes int64, from string) { return cgroupMemoryLimit("/") }

// cgroupMemoryLimit is ContainerMemoryLimit with /proc and /sys under root.
// Without /proc/self/cgroup or its mount, it reads the cgroup file system's
// root at /sys/fs/cgroup: inside a container with a cgroup namespace that
// is the container's own cgroup.
func cgroupMemoryLimit(root string) (int64, string) {
	own, err1 := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	mounts, err2 := os.ReadFile(filepath.Join(root, "proc/self/mountinfo"))
	if err1 == nil && err2 == nil {
		if dir, top, file := ownCgroupDir(string(own), string(mounts)); dir != "" {
			return leastLimit(root, dir, top, file)
		}
	}
	for _, f := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		p := filepath.Join(root, "sys/fs/cgroup", f)
		if n, ok := readLimit(p); ok {
			return n, limitFrom(n, p, root)
		}
	}
	return 0, ""
}

// ownCgroupDir finds the directory of the process's memory cgroup from
// /proc/self/cgroup and /proc/self/mountinfo: the v1 memory controller's
// hierarchy when there is one, else the v2 unified one. It returns the
// directory, the mount point above which no limit can be read, and the
// limit file's name; "" when neither is found.
func ownCgroupDir(own, mountinfo string) (dir, top, file string) {
	var v1, v2 string
	hasV1, hasV2 := false, false
	for _, line := range strings.Split(own, "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1, hasV1 = parts[2], true
			}
		}
	}
	for _, line := range strings.Split(mountinfo, "\n") {
		// ID parent major:minor root mount-point options [optional...] - fstype source super-options
		fields, rest, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, r := strings.Fields(fields), strings.Fields(rest)
		if len(f) < 5 || len(r) < 3 {
			continue
		}
		mroot, point := unescapeMount(f[3]), unescapeMount(f[4])
		switch {
		case hasV1 && r[0] == "cgroup" && hasOption(r[2], "memory"):
			if d, ok := underMount(point, mroot, v1); ok {
				return d, point, "memory.limit_in_bytes"
			}
		case hasV2 && r[0] == "cgroup2" && dir == "":
			if d, ok := underMount(point, mroot, v2); ok {
				dir, top = d, point // unless the memory controller is on v1
			}
		}
	}
	if dir == "" {
		return "", "", ""
	}
	return dir, top, "memory.max"
}

// underMount is the directory of cgroup path under a mount of the
// hierarchy at point whose root is mroot. A path outside the mount's root
// (a cgroup namespace's "/.." paths, a bind mount of another cgroup) is
// not found.
func underMount(point, mroot, path string) (string, bool) {
	rel, ok := path, true
	if mroot != "/" {
		rel, ok = strings.CutPrefix(path, mroot)
		ok = ok && (rel == "" || rel[0] == '/')
	}
	if !ok || strings.Contains(rel, "/..") || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(point, rel), true
}

// hasOption reports whether the comma-separated options hold o.
func hasOption(options, o string) bool {
	for _, x := range strings.Split(options, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline
// and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// leastLimit reads file in dir and each ancestor up to top (all under
// root) and returns the least limit and the file it came from: a cgroup
// cannot use more than any cgroup above it allows (a systemd slice's
// MemoryMax= over a service, a pod's limit over its container).
func leastLimit(root, dir, top, file string) (int64, string) {
	least, from := int64(0), ""
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(root, d, file)
		if n, ok := readLimit(p); ok && n > 0 && (least == 0 || n < least) {
			least, from = n, p
		}
		if d == top || d == "/" || !strings.HasPrefix(d, top) {
			break
		}
	}
	return least, limitFrom(least, from, root)
}

// readLimit reads a cgroup memory limit file: ok when the file exists,
// with 0 for no limit ("max", v1's number near 2^63, or anything not a
// positive number).
func readLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, true
	}
	return n, true
}

// limitFrom is the file a limit n came from, as the system names it (root
// taken off): "" for no limit.
func limitFrom(n int64, path, root string) string {
	if n == 0 {
		return ""
	}
	if rel, err := filepath.Rel(root, path); err == nil {
		return "/" + rel
	}
	return path
}
