//go:build tools

package jobsetbuild

// JobSet's manager (the module root's main package, the binary its image runs as /manager):
// the JobSet controller and its webhooks.
import _ "sigs.k8s.io/jobset"
