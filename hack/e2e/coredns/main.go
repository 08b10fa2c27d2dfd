// Command coredns is CoreDNS with the plugins the e2e cluster's DNS uses:
// the kubernetes plugin answers <svc>.<ns>.svc.cluster.local, the rest are
// the usual health, readiness, cache and error logging. Each import
// registers its plugin; coremain orders them by CoreDNS's own directive list.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
