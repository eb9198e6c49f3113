//go:build !purego

#include "textflag.h"

// func prefetch(p *int64, n uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 -1(AX)(BX*1)
	RET
