// Command testsummary reads `go test -json` on standard input and keeps the
// log quiet: it prints go test's own per-package lines ("ok", "FAIL", "?")
// and, for a test that fails, that test's whole output; the output of
// passing tests is dropped. scripts/test pipes every go test run through it.
//
// With -record FILE it appends one line per failed test to FILE, tab
// separated: the tier, the package, the test and the test's first failure
// line; and one line "counts TIER PASSED FAILED SKIPPED". scripts/test reads
// these records for its final summary. testsummary exits non-zero when a
// test or a package failed.
//
//	go test -json ./... | go run ./scripts/testsummary -tier fast -record /tmp/r
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output events
	FailedBuild string
}

// result is what the summary needs from one test run.
type result struct {
	failures []failure
	passed   int
	failed   int
	skipped  int
}

// failure is one failed test, or a package that failed outside its tests
// (Test empty): a build error, a panic in TestMain, a timeout.
type failure struct {
	Package string
	Test    string
	Line    string // the first line that says what went wrong
}

func main() {
	tier := flag.String("tier", "test", "name of this run in the records")
	record := flag.String("record", "", "append failures and counts to this file")
	flag.Parse()
	res, err := summarise(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if *record != "" {
		if err := writeRecord(*record, *tier, res); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	if len(res.failures) > 0 {
		os.Exit(1)
	}
}

func writeRecord(path, tier string, res result) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for _, fl := range res.failures {
		test := fl.Test
		if test == "" {
			test = "(package)"
		}
		fmt.Fprintf(f, "fail\t%s\t%s\t%s\t%s\n", tier, fl.Package, test, oneLine(fl.Line))
	}
	fmt.Fprintf(f, "counts\t%s\t%d\t%d\t%d\n", tier, res.passed, res.failed, res.skipped)
	return f.Close()
}

func oneLine(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\t", " "))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// testKey names one test of one package.
type testKey struct{ pkg, test string }

// summary is the state of one summarise run.
type summary struct {
	w           io.Writer
	res         result
	out         map[testKey][]string // buffered output per test; "" test: the package's
	failedTests map[string]bool      // packages with a failed test
	buildErr    map[string]string    // import path -> first compiler error
}

// summarise copies the quiet log from r to w and returns the result. Lines
// that are not JSON (go test's own errors) are copied as they are.
func summarise(r io.Reader, w io.Writer) (result, error) {
	s := &summary{w: w, out: map[testKey][]string{}, failedTests: map[string]bool{}, buildErr: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		s.event(e)
	}
	return s.res, sc.Err()
}

// event takes one event of go test -json.
func (s *summary) event(e event) {
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.w, e.Output)
		if _, seen := s.buildErr[e.ImportPath]; !seen && !strings.HasPrefix(e.Output, "# ") {
			s.buildErr[e.ImportPath] = e.Output
		}
	case "output":
		if e.Test == "" && packageLine(e.Output) {
			fmt.Fprint(s.w, e.Output)
			return
		}
		s.out[k] = append(s.out[k], e.Output)
	case "pass", "skip":
		if e.Test != "" && e.Action == "pass" {
			s.res.passed++
		} else if e.Test != "" {
			s.res.skipped++
		}
		delete(s.out, k)
	case "fail":
		if e.Test != "" {
			s.testFailed(k)
			return
		}
		s.packageFailed(e)
	}
}

// testFailed prints a failed test's output and records it, unless a
// subtest of it already stands for it.
func (s *summary) testFailed(k testKey) {
	s.failedTests[k.pkg] = true
	s.print("failed", k, s.out[k])
	if !hasFailedSubtest(s.res.failures, k.pkg, k.test) {
		s.res.failed++
		s.res.failures = append(s.res.failures, failure{k.pkg, k.test, firstFailure(s.out[k])})
	}
	delete(s.out, k)
}

// packageFailed records a package that failed: if none of its tests did,
// the cause is in the package's own output (a build error, TestMain, a
// leak check) or in a test that was still running when the package died
// (a timeout or a panic).
func (s *summary) packageFailed(e event) {
	pk := testKey{e.Package, ""}
	if !s.failedTests[e.Package] {
		s.print("failed package", pk, s.out[pk])
		why := firstFailure(s.out[pk])
		if e.FailedBuild != "" {
			why = "build failed: " + s.buildErr[e.FailedBuild]
		}
		before := len(s.res.failures)
		for tk, lines := range s.out {
			if tk.pkg == e.Package && tk.test != "" && !strings.Contains(tk.test, "/") {
				s.res.failed++
				s.res.failures = append(s.res.failures, failure{e.Package, tk.test,
					"no result (the package ended while it ran): " + firstFailure(append(lines, s.out[pk]...))})
				s.print("unfinished", tk, lines)
			}
		}
		if len(s.res.failures) == before || e.FailedBuild != "" {
			s.res.failures = append(s.res.failures, failure{e.Package, "", why})
		}
	}
	for tk := range s.out {
		if tk.pkg == e.Package {
			delete(s.out, tk)
		}
	}
}

// print shows the buffered output of a test or package that failed.
func (s *summary) print(what string, k testKey, lines []string) {
	if len(lines) == 0 {
		return
	}
	name := k.test
	if name == "" {
		name = "(package)"
	}
	fmt.Fprintf(s.w, "--- output of %s %s (%s)\n", what, name, k.pkg)
	for _, l := range lines {
		fmt.Fprint(s.w, l)
	}
}

// hasFailedSubtest reports whether a subtest of test already stands in the
// failures: a parent fails with its subtests, and the subtest's line is the
// one that says what went wrong.
func hasFailedSubtest(fs []failure, pkg, test string) bool {
	for _, f := range fs {
		if f.Package == pkg && strings.HasPrefix(f.Test, test+"/") {
			return true
		}
	}
	return false
}

// packageLine reports whether a package-level output line is one of go
// test's own result lines, which stay in the quiet log.
func packageLine(s string) bool {
	for _, p := range []string{"ok  \t", "FAIL\t", "?   \t", "FAIL\n", "ok\n"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

var (
	// fileLine is how t.Error and t.Fatal lines begin: "    x_test.go:12: ".
	fileLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)
	// panicLine starts a panic or the runtime's timeout report.
	panicLine = regexp.MustCompile(`^(panic: |fatal error: |WARNING: DATA RACE|\[signal )`)
	// failureWords are words a failure message has and a progress log
	// rarely has: t.Log and t.Error lines look alike in the output.
	failureWords = regexp.MustCompile(`(?i)\b(want|wanted|got|expected|unexpected|fail|failed|fails|error|errors|not|no|never|too|over|under|mismatch|differ|differs|should|must|missing|instead|still|more than|exceeds|exceeded|outside|lost)\b`)
)

// firstFailure picks the line of a test's output that says what went wrong:
// a race report or a panic, else the first t.Error/t.Fatal-looking line
// that reads like a failure, else the last such line (t.Fatal ends a
// test), else the first line that is not go test's own bookkeeping.
func firstFailure(lines []string) string {
	for _, l := range lines {
		if panicLine.MatchString(l) {
			return l
		}
	}
	last := ""
	for _, l := range lines {
		if fileLine.MatchString(l) {
			if failureWords.MatchString(fileLine.ReplaceAllString(l, "")) {
				return l
			}
			last = l
		}
	}
	if last != "" {
		return last
	}
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") || t == "FAIL" || t == "PASS" {
			continue
		}
		return l
	}
	return "(no output)"
}
