package bench

// Experiment (d), not a limiter anyone should use: the lock-free bucket
// table of prototype_bucket_test.go with its buckets in memory the kernel
// is asked to back with 2 MB pages (madvise MADV_HUGEPAGE; this machine's
// transparent huge pages are in madvise mode, and Go's heap does not ask).
// It tests how much of a scattered visit's miss is the page walk: a table
// of a few megabytes spans hundreds of 4 KB pages, more than the first-level
// TLB holds, and under a hypervisor a TLB miss walks two page tables.
// Buckets are cut from one 64 MB mapping, bump-allocated and never
// reused; close unmaps it.

import (
	"context"
	"sync"
	"syscall"
	"unsafe"
)

const hugeArenaSize = 64 << 20

type hugeArena struct {
	mem  []byte     // the mapping
	mu   sync.Mutex // shards grow at once, each under its own lock
	free []byte     // the mapping's unused, 2 MB-aligned tail
}

func newHugeArena() *hugeArena {
	mem, err := syscall.Mmap(-1, 0, hugeArenaSize+2<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	off := (2<<20 - int(uintptr(unsafe.Pointer(&mem[0])))&(2<<20-1)) & (2<<20 - 1)
	free := mem[off : off+hugeArenaSize]
	if err := syscall.Madvise(free, 14); err != nil { // 14 is MADV_HUGEPAGE
		panic(err)
	}
	return &hugeArena{mem: mem, free: free}
}

// alloc returns n zeroed buckets from the arena.
func (a *hugeArena) alloc(n int) []bucket {
	a.mu.Lock()
	defer a.mu.Unlock()
	size := n * int(unsafe.Sizeof(bucket{}))
	if size > len(a.free) {
		panic("hugeArena: out of room")
	}
	b := unsafe.Slice((*bucket)(unsafe.Pointer(&a.free[0])), n)
	a.free = a.free[size:]
	return b
}

type hugeBucketProto struct {
	*bucketCASProto
	arena *hugeArena
}

func newHugeBucketProto() limiter {
	a := newHugeArena()
	return hugeBucketProto{newBucketCASWith(a.alloc), a}
}

func (p hugeBucketProto) allow(ctx context.Context, key string) bool {
	return p.bucketCASProto.allow(ctx, key)
}

// close unmaps the arena; the limiter must not be used after.
func (p hugeBucketProto) close() { _ = syscall.Munmap(p.arena.mem) }
