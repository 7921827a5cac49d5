//go:build tools

package kwokbuild

// kwok's controller (sigs.k8s.io/kwok/cmd/kwok): it keeps the Node objects it is told to
// manage Ready (their Leases) and moves the pods bound to them through their stages (Running
// and Ready, deleted at once), with no kubelet behind them.
import _ "sigs.k8s.io/kwok/cmd/kwok"
