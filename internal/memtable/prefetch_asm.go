//go:build (amd64 || arm64) && !purego

package memtable

// prefetch asks the processor to start loading the cache lines that hold
// the n bytes from p (at most two lines), without waiting for them: a
// prefetch instruction neither faults nor delays the instructions after
// it, including the fences of a clock read and a lock, so the memory
// access overlaps them. Go has no portable form of it.
//
//go:noescape
func prefetch(p *int64, n uintptr)
