// Command pause is the pod sandbox's program in TestCRIPods: it holds
// the pod's namespaces until it is told to stop, as a kubelet's pause
// image does, and is built here so that no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
