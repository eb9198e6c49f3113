// Package chartcheck renders deploy/helm/floodgate with helm's own Go
// packages, for the chart's tests and for scripts/helm-manifests, which
// writes deploy/kubernetes from it. It is a Go module of its own so that
// Floodgate's module does not depend on helm.
package chartcheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
)

// ChartDir is the chart, relative to this package's directory.
const ChartDir = "../floodgate"

// Render renders the chart in chartDir as release "floodgate" in namespace
// "default", with the values files and then the --set style assignments
// applied over the chart's values.yaml, as helm template does. It returns
// each template's output by file name (configmap-rules.yaml, ...), empty
// ones left out.
func Render(chartDir string, valueFiles []string, set ...string) (map[string]string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	for _, f := range valueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, err
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	for _, s := range set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	rv, err := chartutil.ToRenderValues(chrt, vals, chartutil.ReleaseOptions{Name: "floodgate", Namespace: "default", IsInstall: true},
		chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(chrt, rv)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for name, text := range out {
		if path.Ext(name) != ".yaml" || strings.TrimSpace(stripComments(text)) == "" {
			continue
		}
		files[path.Base(name)] = strings.TrimLeft(text, "\n")
	}
	return files, nil
}

// stripComments drops comment lines, to tell an empty template from one
// that renders objects.
func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.TrimSpace(l) != "---" {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// Variant is one directory of plain manifests generated from the chart.
type Variant struct {
	// Dir is the directory, relative to the repository root.
	Dir string
	// Values is a values file relative to the repository root, or "".
	Values string
}

// Variants are the manifests in deploy/kubernetes: the in-memory store,
// and the Redis arrangement.
var Variants = []Variant{
	{Dir: "deploy/kubernetes"},
	{Dir: "deploy/kubernetes/redis", Values: "deploy/helm/values/kubernetes-redis.yaml"},
}

// Header starts every generated manifest.
const Header = "# Generated from deploy/helm/floodgate by scripts/helm-manifests: edit the chart\n# (or its values in deploy/helm/values), then run the script.\n"

// Manifests renders a variant's files from the repository at root.
func Manifests(root string, v Variant) (map[string]string, error) {
	var values []string
	if v.Values != "" {
		values = append(values, filepath.Join(root, v.Values))
	}
	files, err := Render(filepath.Join(root, "deploy/helm/floodgate"), values)
	if err != nil {
		return nil, err
	}
	for name, text := range files {
		files[name] = Header + text
	}
	return files, nil
}

// Write writes every variant's manifests under root, and a
// kustomization.yaml listing them.
func Write(root string) error {
	for _, v := range Variants {
		files, err := Manifests(root, v)
		if err != nil {
			return err
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(root, v.Dir, name), []byte(text), 0o644); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(root, v.Dir, "kustomization.yaml"), []byte(Kustomization(v, files)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Kustomization is the kustomization.yaml of a variant: its files, and how
// to patch them by name.
func Kustomization(v Variant, files map[string]string) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(Header)
	fmt.Fprintf(&b, "#   kubectl apply -k %s\n", v.Dir)
	b.WriteString(`# Change the image with: kustomize edit set image floodgate=REGISTRY/floodgate:TAG
# Patch by name, not by index, e.g. (strategic merge; the container is
# matched by its name):
#   patches:
#     - patch: |-
#         apiVersion: apps/v1
#         kind: Deployment
#         metadata: {name: floodgate}
#         spec:
#           template:
#             spec:
#               containers:
#                 - name: floodgate
#                   resources: {limits: {memory: 1Gi}}
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
`)
	for _, n := range names {
		fmt.Fprintf(&b, "  - %s\n", n)
	}
	return b.String()
}
