package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name, file, content string
		want                int64
	}{
		{"v2 limit", "memory.max", "268435456\n", 256 << 20},
		{"v2 no limit", "memory.max", "max\n", 0},
		{"v1 limit", "memory/memory.limit_in_bytes", "536870912\n", 512 << 20},
		{"v1 no limit", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0},
		{"garbage", "memory.max", "lots\n", 0},
		{"no cgroup files", "", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.file != "" {
				os.MkdirAll(filepath.Dir(filepath.Join(root, c.file)), 0o755)
				os.WriteFile(filepath.Join(root, c.file), []byte(c.content), 0o644)
			}
			if got := cgroupMemoryLimit(root); got != c.want {
				t.Errorf("got %d, want %d", got, c.want)
			}
		})
	}
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
			if again.FitMemory(c.container); again.Store.MaxBytes != cfg.Store.MaxBytes || again.Arrangement != cfg.Arrangement {
				t.Errorf("a second FitMemory changed the bounds")
			}
		})
	}
}
