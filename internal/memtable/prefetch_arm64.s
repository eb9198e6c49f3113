//go:build !purego

#include "textflag.h"

// func prefetch(p *int64, n uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVD p+0(FP), R0
	MOVD n+8(FP), R1
	PRFM (R0), PLDL1KEEP
	ADD  R1, R0
	SUB  $1, R0
	PRFM (R0), PLDL1KEEP
	RET
