// etcd for tether's local control plane: the etcd server of the module this go.mod
// pins, started as the etcd command starts it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
