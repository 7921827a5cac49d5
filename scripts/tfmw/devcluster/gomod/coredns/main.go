// Command coredns is CoreDNS with only the plugins the local cluster's DNS needs,
// built the way CoreDNS documents for a chosen plugin set: import the plugins, set
// dnsserver.Directives to them in plugin.cfg order, and call coremain.Run().
// scripts/kube/build_coredns.py builds it; go.mod pins CoreDNS, go.sum is the checksum
// of every source that goes into the binary.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order the plugins see a query in: CoreDNS's plugin.cfg order, restricted to the
// plugins imported above (tests/kube/test_build_coredns.py checks both). Their imports
// also register debug, dnstap, metadata, prometheus and transfer (`coredns -plugins`
// lists them), but a Corefile can use only the directives named here.
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
