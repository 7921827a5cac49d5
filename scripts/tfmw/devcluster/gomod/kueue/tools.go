//go:build tools

package kueuebuild

// Kueue's manager (sigs.k8s.io/kueue/cmd/kueue, the binary its image runs as /manager):
// the controllers and webhooks of the queueing the chart's scheduling.gang=kueue targets.
import _ "sigs.k8s.io/kueue/cmd/kueue"
