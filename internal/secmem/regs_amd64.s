#include "textflag.h"

// func wipeRegisters(avx bool)
TEXT ·wipeRegisters(SB), NOSPLIT, $0-1
	MOVB	avx+0(FP), AX
	CMPB	AX, $0
	JEQ	sse
	VZEROALL
	RET
sse:
	XORPS	X0, X0
	XORPS	X1, X1
	XORPS	X2, X2
	XORPS	X3, X3
	XORPS	X4, X4
	XORPS	X5, X5
	XORPS	X6, X6
	XORPS	X7, X7
	XORPS	X8, X8
	XORPS	X9, X9
	XORPS	X10, X10
	XORPS	X11, X11
	XORPS	X12, X12
	XORPS	X13, X13
	XORPS	X14, X14
	XORPS	X15, X15
	RET

// func copyString(dst, src unsafe.Pointer, n uintptr)
TEXT ·copyString(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	CLD
	REP;	MOVSB
	RET
