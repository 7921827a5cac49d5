//go:build tools

package trainingoperatorbuild

// Kubeflow training-operator v1's manager (cmd/training-operator.v1, the binary its image runs
// as /manager): the TFJob controller and its webhook. v1.9.0 is the last release with it.
import _ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
