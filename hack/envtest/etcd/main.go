// Command etcd is the etcd server, built from Go module sources for envtest
// because prebuilt release binaries cannot be downloaded on every machine.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
