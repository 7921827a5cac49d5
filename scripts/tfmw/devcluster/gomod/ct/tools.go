//go:build tools

package ctbuild

// chart-testing's `ct` (github.com/helm/chart-testing/v3/ct): the field's chart CI, whose
// `ct lint` make lint runs on the chart (ct.yaml at the repository's root).
import _ "github.com/helm/chart-testing/v3/ct"
