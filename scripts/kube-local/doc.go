// Package kubelocal holds no code: its module pins the versions of etcd,
// kube-apiserver, kubectl and the helm CLI that scripts/kube-apiserver-local
// builds (the go.mod's tool lines), with k8s.io/kubernetes' staging modules
// replaced by their published versions, so that Floodgate's own module never
// depends on them.
package kubelocal
