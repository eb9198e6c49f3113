package floodgate_test

import (
	"bufio"
	"bytes"
	"go/ast"
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

// outsideModules are the modules that check or measure Floodgate from
// outside, each with requirements of its own: no package imports them, and
// the layering does not cover them.
var outsideModules = []string{"bench", "deploy/helm/chartcheck", "interop/envoyratelimit", "interop/gubernator", "scripts/kube-local", "scripts/redis-latency-rig"}

// walkModule calls f with the path of every file of Floodgate's modules:
// the root module and the nested ones (docs/modules.md), without the
// outsideModules, hidden directories and testdata.
func walkModule(f func(path string) error) error {
	return filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return f(path)
		}
		if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if slices.Contains(outsideModules, filepath.ToSlash(path)) {
			return filepath.SkipDir
		}
		return nil
	})
}

// packageImports returns, for every package directory walkModule visits,
// the Floodgate packages its files import, split into non-test and test
// imports.
func packageImports(t *testing.T) (code, tests map[string][]string) {
	t.Helper()
	code, tests = map[string][]string{}, map[string][]string{}
	fset := token.NewFileSet()
	err := walkModule(func(path string) error {
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
			t.Errorf("docs/architecture.md lists %s, which is not a package of any module", pkg)
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
			case from == testLayer: // test helpers may use each other
				continue
			case to == testLayer:
				t.Errorf("%s imports the test helper %s outside a _test.go file", pkg, imp)
			case to >= from:
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must go to a lower layer (docs/architecture.md)", pkg, from, imp, to)
			}
		}
	}
	for pkg, imps := range tests {
		for _, imp := range imps {
			// An example's test may run the server it is an example for.
			if strings.HasPrefix(imp, "cmd/") && !strings.HasPrefix(pkg, "cmd/") && !strings.HasPrefix(pkg, "examples/") {
				t.Errorf("tests of %s import the command %s", pkg, imp)
			}
		}
	}
	for pkg, layer := range layers {
		// The root internal/ holds leaf helpers, the memory store's core
		// (which memstore and the root package share), and the test kit.
		if strings.HasPrefix(pkg, "internal/") && !strings.HasPrefix(pkg, "internal/testkit/") && pkg != "internal/memtable" && layer > 1 {
			t.Errorf("%s is at layer %d: the root internal/ holds only leaf helpers (layer 0 or 1) and internal/testkit", pkg, layer)
		}
		if strings.HasPrefix(pkg, "internal/testkit/") && layer != testLayer {
			t.Errorf("%s is under internal/testkit but not a test helper", pkg)
		}
	}
	if t.Failed() {
		names := slices.Sorted(maps.Keys(code))
		t.Logf("packages found: %s", strings.Join(names, " "))
	}
}

// maxFileLines is the most lines a product source file (Go or Lua, not a
// test) may have: a longer one is cut by concern into files of its own.
const maxFileLines = 800

// TestFileLength keeps product source files under maxFileLines lines.
func TestFileLength(t *testing.T) {
	err := walkModule(func(path string) error {
		if !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".lua")) || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(data, []byte("\n")); n > maxFileLines {
			t.Errorf("%s has %d lines (over %d): cut it by concern into files of its own", path, n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// maxFunctionLines is the length, in lines from "func" to the closing brace,
// above which a function must say in its doc comment why it is long.
const maxFunctionLines = 80

// longMarker is what the doc comment of a longer function must contain,
// followed by the reason.
const longMarker = "Long because"

// TestFunctionLength keeps functions short: every non-test function of the
// modules longer than maxFunctionLines lines is cut into named steps, or
// its doc comment says "Long because ..." and why.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	err := walkModule(func(path string) error {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if lines <= maxFunctionLines || strings.Contains(fn.Doc.Text(), longMarker) {
				continue
			}
			t.Errorf("%s: %s is %d lines (over %d): cut it into named steps, or say %q and why in its doc comment",
				fset.Position(fn.Pos()), fn.Name.Name, lines, maxFunctionLines, longMarker+" ...")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
