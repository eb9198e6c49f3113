package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSummarise reads recorded go test -json runs of a small module with
// a passing, a failing, a failing table case, a panicking, a hanging and
// a skipped test, and a package that does not compile.
func TestSummarise(t *testing.T) {
	for _, c := range []struct {
		file                    string
		passed, failed, skipped int
		want                    []failure
	}{
		{"failures.json", 2, 4, 1, []failure{
			{"fake/a", "TestBad", "    a_test.go:4: want 1, got 2\n"},
			{"fake/a", "TestTable/y", "    a_test.go:7: case y broke\n"},
			{"fake/b", "TestPanic", "panic: assignment to entry in nil map [recovered, repanicked]\n"},
			{"fake/c", "TestHang", "no result (the package ended while it ran): panic: test timed out after 3s\n"},
		}},
		{"build.json", 0, 0, 0, []failure{
			{"fake/a", "", "build failed: a/bad.go:2:12: undefined: undefined\n"},
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var log strings.Builder
			res, err := summarise(f, &log)
			if err != nil {
				t.Fatal(err)
			}
			if res.passed != c.passed || res.failed != c.failed || res.skipped != c.skipped {
				t.Errorf("passed %d, failed %d, skipped %d; want %d, %d, %d", res.passed, res.failed, res.skipped, c.passed, c.failed, c.skipped)
			}
			if len(res.failures) != len(c.want) {
				t.Fatalf("failures %q, want %q", res.failures, c.want)
			}
			for i, w := range c.want {
				if res.failures[i] != w {
					t.Errorf("failure %d = %q, want %q", i, res.failures[i], w)
				}
			}
			if strings.Contains(log.String(), "noise") {
				t.Errorf("the quiet log shows a passing test's output:\n%s", log.String())
			}
			if !strings.Contains(log.String(), "FAIL\tfake/a") {
				t.Errorf("the quiet log lacks go test's FAIL line:\n%s", log.String())
			}
		})
	}
}

// TestSummariseKeepsOtherLines checks that lines that are not JSON pass
// through, so go's own errors stay visible.
func TestSummariseKeepsOtherLines(t *testing.T) {
	var log strings.Builder
	if _, err := summarise(strings.NewReader("go: cannot find main module\n"), &log); err != nil {
		t.Fatal(err)
	}
	if log.String() != "go: cannot find main module\n" {
		t.Errorf("log = %q", log.String())
	}
}
