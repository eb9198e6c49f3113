package floodgate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maxExportedNames is the number of top-level exported names (constants,
// variables, types and functions; not methods or fields) a package listed
// in TestExportedNames stays under, so that its go doc reads as one
// concept.
const maxExportedNames = 30

// TestExportedNames counts the top-level exported names of the packages
// whose surface is held small, in their non-test files, and fails when one
// has maxExportedNames or more.
func TestExportedNames(t *testing.T) {
	for _, dir := range []string{"algorithm", "rules"} {
		t.Run(dir, func(t *testing.T) {
			names := exportedNames(t, dir)
			if len(names) >= maxExportedNames {
				t.Errorf("package %s exports %d top-level names, want under %d: move what only Floodgate's own packages need under internal/, or group it: %s",
					dir, len(names), maxExportedNames, strings.Join(names, " "))
			}
		})
	}
}

// exportedNames returns the sorted top-level exported names of the
// package in dir, read from its non-test Go files.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var names []string
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			names = append(names, declNames(d)...)
		}
	}
	slices.Sort(names)
	return names
}

// declNames returns the exported top-level names d declares: a function
// without a receiver, or each type, constant and variable of a GenDecl.
func declNames(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil && d.Name.IsExported() {
			names = append(names, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if s.Name.IsExported() {
					names = append(names, s.Name.Name)
				}
			case *ast.ValueSpec:
				for _, id := range s.Names {
					if id.IsExported() {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}
