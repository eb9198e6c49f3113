package floodgate_test

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/floodgate-dev/floodgate"

// layerRow matches a row of a package table in docs/architecture.md:
// | `package` | layer | what it is |
var layerRow = regexp.MustCompile("^\\| `([^`]+)` \\| (\\d+|test) \\|")

// testLayer marks packages that only _test.go files may import.
const testLayer = -1

// docLayers reads the package tables of docs/architecture.md.
func docLayers(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layers := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := layerRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		layer := testLayer
		if m[2] != "test" {
			layer, _ = strconv.Atoi(m[2])
		}
		pkg := m[1]
		if pkg == "floodgate" {
			pkg = "."
		}
		if _, dup := layers[pkg]; dup {
			t.Errorf("docs/architecture.md lists %s twice", pkg)
		}
		layers[pkg] = layer
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return layers
}

// packageImports returns, for every package directory of the main module,
// the module's own packages its files import, split into non-test and test
// imports. Directories of other modules (bench) and testdata are skipped.
func packageImports(t *testing.T) (code, tests map[string][]string) {
	t.Helper()
	code, tests = map[string][]string{}, map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		isTest := strings.HasSuffix(path, "_test.go")
		if _, ok := code[pkg]; !ok && !isTest {
			code[pkg] = nil
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p != modulePath && !strings.HasPrefix(p, modulePath+"/") {
				continue
			}
			rel := "."
			if p != modulePath {
				rel = strings.TrimPrefix(p, modulePath+"/")
			}
			if isTest {
				tests[pkg] = append(tests[pkg], rel)
			} else {
				code[pkg] = append(code[pkg], rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return code, tests
}

// TestArchitecture holds docs/architecture.md and the import graph equal:
// every package is listed with a layer, and every non-test import goes to a
// lower layer.
func TestArchitecture(t *testing.T) {
	layers := docLayers(t)
	code, tests := packageImports(t)
	for pkg := range code {
		if _, ok := layers[pkg]; !ok {
			t.Errorf("package %s is not in docs/architecture.md: add it to a table with its layer", pkg)
		}
	}
	for pkg := range layers {
		if _, ok := code[pkg]; !ok {
			t.Errorf("docs/architecture.md lists %s, which is not a package of the module", pkg)
		}
	}
	for pkg, imps := range code {
		from, ok := layers[pkg]
		if !ok {
			continue
		}
		for _, imp := range imps {
			to, ok := layers[imp]
			switch {
			case !ok:
				continue // reported above
			case to == testLayer:
				t.Errorf("%s imports the test helper %s outside a _test.go file", pkg, imp)
			case from == testLayer:
				continue
			case to >= from:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must go to a lower layer (docs/architecture.md)", pkg, from, imp, to)
			case !strings.HasPrefix(pkg, "internal/") && !strings.HasPrefix(pkg, "cmd/") && strings.HasPrefix(imp, "internal/"):
				t.Errorf("public package %s imports %s", pkg, imp)
			}
		}
	}
	for pkg, imps := range tests {
		for _, imp := range imps {
			if strings.HasPrefix(imp, "cmd/") && !strings.HasPrefix(pkg, "cmd/") {
				t.Errorf("tests of %s import the command %s", pkg, imp)
			}
		}
	}
	if t.Failed() {
		names := slices.Sorted(maps.Keys(code))
		t.Logf("packages found: %s", strings.Join(names, " "))
	}
}
