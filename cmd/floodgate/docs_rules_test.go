package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// docs/rules.md shows real output of check and sim keys; this test fails
// when the output changes and the document was not updated.
func TestRulesDocShowsRealOutput(t *testing.T) {
	doc, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	// The document quotes examples/rules.yaml from its domain line on.
	ex, err := os.ReadFile("../../examples/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body := ex[bytes.Index(ex, []byte("domain: lending")):]
	if !bytes.Contains(doc, body) {
		t.Errorf("docs/rules.md does not quote examples/rules.yaml as it is")
	}
	for _, args := range [][]string{
		{"check", "examples/rules.yaml", "--routes", "examples/routes.txt",
			"--cardinality", "ip=20000", "--cardinality", "header:x-api-key=3000",
			"--cardinality", "member=5000", "--cardinality", "tenant=40", "--cardinality", "client=3"},
		{"check", "examples/gateway-prefix.yaml", "--routes", "examples/gateway-routes.txt"},
		{"sim", "keys"},
	} {
		// Run from this directory, then show paths as from the repository
		// root, as the document does.
		rel := make([]string, len(args))
		for i, a := range args {
			rel[i] = a
			if strings.HasPrefix(a, "examples/") {
				rel[i] = "../../" + a
			}
		}
		var out bytes.Buffer
		if err := dispatch(rel, &out, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		text := strings.ReplaceAll(out.String(), "../../examples/", "examples/")
		for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			if line == "" {
				continue
			}
			if !bytes.Contains(doc, []byte("    "+line+"\n")) {
				t.Errorf("docs/rules.md lacks this line of `floodgate %s`:\n%s", strings.Join(args, " "), line)
			}
		}
	}
}
