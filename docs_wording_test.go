package floodgate_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// workLog matches what documentation must not carry: issue numbers (a bare
// #N; owner/repo#N names an upstream change a reader can look up), work-log
// wording and names of sources a reader cannot follow.
var workLog = regexp.MustCompile(`(?i)(^|[^A-Za-z0-9/&_-])#[0-9]{1,5}\b|\bissues? [0-9]+\b|\b(this|previous|earlier|last|next|that) session\b|\bin the session\b|reference design|gateway study|\bseeds? 0[0-9]{2}\b|\(seed: `)

// datedRun matches a date or a time of day, which current documentation
// does not need (raw result files under bench/results keep theirs, and may
// be linked by name).
var datedRun = regexp.MustCompile(`\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b|\b[0-2][0-9]:[0-5][0-9] UTC\b`)

// rawFileName is a link to a raw result file, whose name may hold a date.
var rawFileName = regexp.MustCompile(`[A-Za-z0-9_./-]+\.(txt|json|csv|md)\b`)

// TestDocsHaveNoWorkLog greps the tree's Markdown, and the binary's own
// text (cmd/floodgate's main package outside tests), for issue numbers, work-log wording
// and dated runs, so that the docs stay documentation.
func TestDocsHaveNoWorkLog(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		// The binary's own text: the main package's help and messages.
		help := filepath.Dir(path) == filepath.Join("cmd", "floodgate") && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")
		if !strings.HasSuffix(path, ".md") && !help {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := workLog.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: documentation is no work log (no issue numbers, sessions or unnamed sources): %s", path, i+1, strings.TrimSpace(m), line)
			}
			if m := datedRun.FindString(rawFileName.ReplaceAllString(line, "")); m != "" {
				t.Errorf("%s:%d: %q: state current figures with the command that reproduces them, not when they were run: %s", path, i+1, m, line)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
