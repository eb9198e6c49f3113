package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestSimTokens(t *testing.T) {
	var out, errb bytes.Buffer
	if err := dispatch([]string{"sim", "tokens", "--duration", "3m"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	for _, want := range []string{"forgiven", "settled", "reserved", "busiest window", "settled bound"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := dispatch([]string{"sim", "tokens", "--duration", "2m", "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Runs []struct{ Mode string } `json:"runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || len(v.Runs) != 3 {
		t.Fatalf("json: %v %s", err, out.String())
	}
	if err := dispatch([]string{"sim", "tokens", "--max-cost", "0"}, &out, &errb); err == nil {
		t.Fatal("bad shape accepted")
	}
}

// docs/integrations.md shows the real output of `floodgate sim tokens`.
func TestIntegrationsDocShowsSimTokens(t *testing.T) {
	doc, err := os.ReadFile("../../docs/integrations.md")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dispatch([]string{"sim", "tokens"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	for _, line := range lines[2:] { // after the description of the shape
		if line != "" && !bytes.Contains(doc, []byte("    "+line+"\n")) {
			t.Errorf("docs/integrations.md lacks this line of `floodgate sim tokens`:\n%s", line)
		}
	}
}
