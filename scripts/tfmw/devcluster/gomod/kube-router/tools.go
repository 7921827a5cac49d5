//go:build tools

package kuberouterbuild

// kube-router's command (github.com/cloudnativelabs/kube-router/v2/cmd/kube-router), built
// with only its network policy controller turned on: the local cluster's NetworkPolicy engine.
import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
