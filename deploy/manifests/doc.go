// Package manifests holds jaild's plain Kubernetes manifests (jaild.yaml),
// rendered from the Helm chart in deploy/helm/jaild by
// scripts/render-manifests.sh, and a test that the committed file is well
// formed. scripts/k8s-test.sh checks it equals a fresh render and applies it
// to a real API server.
package manifests
