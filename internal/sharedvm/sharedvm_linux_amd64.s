#include "textflag.h"

// func run(calls unsafe.Pointer, n, flags uintptr) uintptr
TEXT ·run(SB),NOSPLIT,$0-32
	MOVQ	calls+0(FP), R12
	MOVQ	n+8(FP), R13
	MOVQ	flags+16(FP), DI
	MOVQ	$56, AX		// SYS_clone
	XORQ	SI, SI		// the same stack, untouched by the child
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	SYSCALL
	CMPQ	AX, $0
	JNE	parent
loop:
	// The child: registers only. The kernel keeps R12 and R13 across
	// a system call.
	TESTQ	R13, R13
	JZ	exit
	MOVQ	0(R12), AX
	MOVQ	8(R12), DI
	MOVQ	16(R12), SI
	MOVQ	24(R12), DX
	MOVQ	32(R12), R10
	MOVQ	40(R12), R8
	MOVQ	48(R12), R9
	SYSCALL
	MOVQ	AX, 56(R12)	// Ret
	ADDQ	$64, R12
	DECQ	R13
	JMP	loop
exit:
	MOVQ	$60, AX		// SYS_exit
	XORQ	DI, DI
	SYSCALL
	JMP	exit
parent:
	MOVQ	AX, ret+24(FP)
	RET
