package main

import (
	"os"
	"syscall"
)

func main() {
	execProgram = syscall.Exec
	os.Exit(Main(os.Args, os.Stdin, os.Stdout, os.Stderr))
}
