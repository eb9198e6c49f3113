//go:build (!amd64 && !arm64) || purego

package memtable

// prefetch does nothing where the store has no prefetch instruction for
// the processor (see prefetch_asm.go).
func prefetch(p *int64, n uintptr) {}
