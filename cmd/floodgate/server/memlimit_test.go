package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A fake system's mountinfo lines: cgroup v2 alone, and the hybrid layout
// (v1 controllers, memory among them, and v2 at /sys/fs/cgroup/unified).
const (
	mountsV2 = `25 1 0:23 / / rw - ext4 /dev/root rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
`
	mountsHybrid = `25 1 0:23 / / rw - ext4 /dev/root rw
30 25 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	v1NoLimit = "9223372036854771712\n"
)

// TestCgroupMemoryLimit reads the limit over fake /proc and /sys trees:
// the process's own cgroup, not the hierarchy's root, on v1 and v2, the
// least limit of it and its ancestors (a systemd slice, a pod), and the
// root of /sys/fs/cgroup when /proc does not say more.
func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name      string
		own       string // /proc/self/cgroup; "" for none
		mountinfo string
		files     map[string]string // under /sys/fs/cgroup
		want      int64
		wantFrom  string
	}{
		{"v2, systemd service with MemoryMax", "0::/system.slice/floodgate.service\n", mountsV2,
			map[string]string{"system.slice/memory.max": "max\n", "system.slice/floodgate.service/memory.max": "268435456\n"},
			256 << 20, "/sys/fs/cgroup/system.slice/floodgate.service/memory.max"},
		{"v2, nested under a limited parent", "0::/kubepods/pod1/ctr\n", mountsV2,
			map[string]string{"kubepods/memory.max": "max\n", "kubepods/pod1/memory.max": "268435456\n", "kubepods/pod1/ctr/memory.max": "max\n"},
			256 << 20, "/sys/fs/cgroup/kubepods/pod1/memory.max"},
		{"v2, the least of several", "0::/a/b/c\n", mountsV2,
			map[string]string{"a/memory.max": "1073741824\n", "a/b/memory.max": "268435456\n", "a/b/c/memory.max": "536870912\n"},
			256 << 20, "/sys/fs/cgroup/a/b/memory.max"},
		{"v2, cgroup namespace", "0::/\n", mountsV2,
			map[string]string{"memory.max": "536870912\n"}, 512 << 20, "/sys/fs/cgroup/memory.max"},
		{"v2, no limit", "0::/a\n", mountsV2, map[string]string{"a/memory.max": "max\n"}, 0, ""},
		{"v1 in a hybrid layout, child cgroup", "9:name=systemd:/\n4:memory:/process_api/x/r3\n1:cpu,cpuacct:/\n0::/\n", mountsHybrid,
			map[string]string{"memory/memory.limit_in_bytes": v1NoLimit, "memory/process_api/memory.limit_in_bytes": v1NoLimit,
				"memory/process_api/x/memory.limit_in_bytes": v1NoLimit, "memory/process_api/x/r3/memory.limit_in_bytes": "268435456\n",
				"unified/memory.max": "max\n"},
			256 << 20, "/sys/fs/cgroup/memory/process_api/x/r3/memory.limit_in_bytes"},
		{"v1, a container's bind mount of its own cgroup", "4:memory:/docker/abc\n",
			"34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
			map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"v1, no limit", "4:memory:/a\n", mountsHybrid,
			map[string]string{"memory/memory.limit_in_bytes": v1NoLimit, "memory/a/memory.limit_in_bytes": v1NoLimit}, 0, ""},
		{"v2 path outside the namespace", "0::/../../other\n", mountsV2,
			map[string]string{"memory.max": "268435456\n"}, 256 << 20, "/sys/fs/cgroup/memory.max"},
		{"no /proc: v2 root", "", "", map[string]string{"memory.max": "268435456\n"}, 256 << 20, "/sys/fs/cgroup/memory.max"},
		{"no /proc: v1 root", "", "", map[string]string{"memory/memory.limit_in_bytes": "536870912\n"}, 512 << 20, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"garbage", "0::/\n", mountsV2, map[string]string{"memory.max": "lots\n"}, 0, ""},
		{"nothing", "", "", nil, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			write := func(name, content string) {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.own != "" {
				write("proc/self/cgroup", c.own)
				write("proc/self/mountinfo", c.mountinfo)
			}
			for name, content := range c.files {
				write(filepath.Join("sys/fs/cgroup", name), content)
			}
			got, from := cgroupMemoryLimit(root)
			if got != c.want || from != c.wantFrom {
				t.Errorf("got %d from %q, want %d from %q", got, from, c.want, c.wantFrom)
			}
		})
	}
}

// FuzzOwnCgroupDir: any /proc/self/cgroup and mountinfo parse without
// panicking, and a directory found lies under the mount point returned.
func FuzzOwnCgroupDir(f *testing.F) {
	f.Add("0::/system.slice/x.service\n", mountsV2)
	f.Add("4:memory:/process_api/x/r3\n0::/\n", mountsHybrid)
	f.Add("4:memory:/docker/abc\n", "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n")
	f.Add("0::/../x\n", mountsV2)
	f.Fuzz(func(t *testing.T, own, mountinfo string) {
		dir, top, file := ownCgroupDir(own, mountinfo)
		if dir == "" {
			return
		}
		if file == "" || (dir != top && !strings.HasPrefix(dir, strings.TrimSuffix(top, "/")+"/")) {
			t.Fatalf("dir %q, mount %q, file %q", dir, top, file)
		}
	})
}

// TestFitMemory checks the sizes derived from a container's memory limit,
// and that bounds the configuration sets are kept.
func TestFitMemory(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                       string
		store                      Store
		arr                        Arrangement
		container                  int64
		storeMax, nodeMax, pending int64
		goLimit                    int64
		derived                    bool
	}{
		{name: "memory, no container", store: Store{Type: StoreMemory},
			storeMax: 1 << 30, goLimit: 1<<30 + 1<<29 + 256*mib},
		{name: "memory, 256 MiB container", store: Store{Type: StoreMemory}, container: 256 * mib,
			storeMax: (256*mib - 256*mib/10 - 64*mib) * 2 / 3, goLimit: 256*mib - 256*mib/10, derived: true},
		{name: "memory, 2 GiB container", store: Store{Type: StoreMemory}, container: 2048 * mib,
			storeMax: (2048*mib - 2048*mib/10 - 256*mib) * 2 / 3, goLimit: 2048*mib - 2048*mib/10, derived: true},
		{name: "memory, bound set, small container", store: Store{Type: StoreMemory, MaxBytes: 1 << 30}, container: 512 * mib,
			storeMax: 1 << 30, goLimit: 512*mib - 512*mib/10},
		{name: "memory, tiny container", store: Store{Type: StoreMemory}, container: 32 * mib,
			storeMax: minStoreMaxBytes, goLimit: 32*mib - 32*mib/10, derived: true},
		{name: "redis, 1 GiB container", store: Store{Type: StoreRedis}, container: 1024 * mib,
			nodeMax: (1024*mib - 1024*mib/10 - 256*mib) * 2 / 3 * 8 / 9, pending: (1024*mib - 1024*mib/10 - 256*mib) * 2 / 3 / 9,
			goLimit: 1024*mib - 1024*mib/10, derived: true},
		{name: "redis, bounds set", store: Store{Type: StoreRedis}, arr: Arrangement{MaxBytes: 64 * mib}, container: 1024 * mib,
			nodeMax: 64 * mib, goLimit: (64*mib+64*mib)*3/2 + 256*mib}, // the default queue's 64 MiB with it
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Store: c.store, Arrangement: c.arr}
			p := cfg.FitMemory(c.container)
			if cfg.Store.MaxBytes != c.storeMax || cfg.Arrangement.MaxBytes != c.nodeMax || cfg.Arrangement.MaxPendingBytes != c.pending {
				t.Errorf("bounds: store %d node %d pending %d; want %d %d %d", cfg.Store.MaxBytes, cfg.Arrangement.MaxBytes,
					cfg.Arrangement.MaxPendingBytes, c.storeMax, c.nodeMax, c.pending)
			}
			if p.GoLimit != c.goLimit || p.Derived != c.derived || p.Container != c.container {
				t.Errorf("plan %+v; want GoLimit %d, Derived %v", p, c.goLimit, c.derived)
			}
			if c.container > 0 && p.GoLimit > c.container-c.container/10 {
				t.Errorf("Go limit %d above 90%% of the container's %d", p.GoLimit, c.container)
			}
			// A second call keeps what the first derived.
			again := cfg
			if again.FitMemory(c.container); again.Store.MaxBytes != cfg.Store.MaxBytes || !equalArrangements(again.Arrangement, cfg.Arrangement) {
				t.Errorf("a second FitMemory changed the bounds")
			}
		})
	}
}

// equalArrangements compares two arrangements field by field (Region holds
// a slice, so Arrangement is not comparable with ==).
func equalArrangements(a, b Arrangement) bool {
	return fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}
