// Command manifests writes deploy/kubernetes from the Helm chart; run it
// through scripts/helm-manifests.
package main

import (
	"fmt"
	"os"

	"github.com/floodgate-dev/floodgate/deploy/helm/chartcheck"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: manifests REPOSITORY-ROOT")
		os.Exit(2)
	}
	if err := chartcheck.Write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}
