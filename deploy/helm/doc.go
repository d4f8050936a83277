// Package chart holds the tests of the walbox Helm chart in walbox/: it renders the chart with a
// pinned Helm built from the Go module proxy, lints it, and decodes every rendered object strictly
// into the Kubernetes API types (and the prometheus-operator types for the monitoring objects), so
// an unknown or misspelt field fails. It is a module of its own so that neither Helm nor the
// Kubernetes API packages become dependencies of walbox itself. Run it with `make chart`.
package chart
