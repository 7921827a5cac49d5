//go:build tools

package sourcecontrollerbuild

// Flux's source-controller (github.com/fluxcd/source-controller, its main package at the
// module's root, the binary its image runs): fetches the chart the HelmRelease tests install
// from the local OCI registry and serves it to helm-controller as an artifact.
import _ "github.com/fluxcd/source-controller"
