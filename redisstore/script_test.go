package redisstore

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeScript names a file to write the joined script to, for the scripts
// that measure it (scripts/redis-script-cost, scripts/redis-script-compare):
//
//	go test ./redisstore -run '^TestScriptParts$' -args -write-script=/tmp/floodgate.lua
var writeScript = flag.String("write-script", "", "write the joined Lua script to this file")

// TestScriptParts holds the layout of lua/: every file is joined exactly
// once, and every algorithm's file has its Go twin in package algorithm.
func TestScriptParts(t *testing.T) {
	entries, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	joined := slices.Concat(scriptHead, scriptAlgorithms, scriptOps)
	for _, e := range entries {
		n := 0
		for _, name := range joined {
			if name == e.Name() {
				n++
			}
		}
		if n != 1 {
			t.Errorf("lua/%s is joined %d times, want once", e.Name(), n)
		}
	}
	if len(entries) != len(joined) {
		t.Errorf("lua/ holds %d files, the join names %d", len(entries), len(joined))
	}
	for _, name := range scriptAlgorithms {
		// The Go twin is algorithm/NAME.go, or algorithm/NAME/NAME.go for
		// an algorithm in a package of its own.
		base := strings.TrimSuffix(name, ".lua")
		twin := filepath.Join("..", "algorithm", base+".go")
		if _, err := os.Stat(twin); err != nil {
			if _, err2 := os.Stat(filepath.Join("..", "algorithm", base, base+".go")); err2 != nil {
				t.Errorf("lua/%s has no Go twin: %v", name, err)
			}
		}
	}
	if !strings.Contains(script, "local function build(code)") || !strings.HasSuffix(script, "return out\n") {
		t.Error("the joined script lacks build or the final answer")
	}
	if *writeScript != "" {
		if err := os.WriteFile(*writeScript, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
