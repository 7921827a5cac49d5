//go:build tools

package helmcontrollerbuild

// Flux's helm-controller (github.com/fluxcd/helm-controller, its main package at the
// module's root, the binary its image runs): reconciles the HelmReleases the GitOps tests
// create, installing the chart from source-controller's artifact.
import _ "github.com/fluxcd/helm-controller"
