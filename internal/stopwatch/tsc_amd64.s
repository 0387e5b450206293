#include "textflag.h"

// func tsc() int64
TEXT ·tsc(SB), NOSPLIT, $0-8
	LFENCE
	RDTSC
	SHLQ	$32, DX
	ORQ	DX, AX
	MOVQ	AX, ret+0(FP)
	RET
