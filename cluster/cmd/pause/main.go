// Command pause is the pod sandbox's process: it holds the pod's namespaces
// open, reaps children that end up with it, and exits on SIGINT or SIGTERM.
// cluster/images.sh builds it statically into the local sandbox image, since
// no registry with the upstream pause image is reachable.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
