// Command etcd is the etcd server at the version k8s.io/kubernetes pins for
// its own client (go.etcd.io/etcd/server/v3 in go.mod), so the cluster's
// store comes from the same module graph as the control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
