// Package testmain is the TestMain of the packages whose code starts
// goroutines: it discards what the code logs to the default logger (a
// failing test says what went wrong through t.Log) and, once every test
// has passed, fails the package if a goroutine is left running, printing
// the leaked goroutines' stacks.
//
//	func TestMain(m *testing.M) { testmain.Run(m) }
package testmain

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Run runs m's tests between Setup and Check and exits with their status.
func Run(m *testing.M) {
	Setup()
	os.Exit(Check(m.Run()))
}

// Setup discards the default logger's output, for a TestMain that does
// more than Run.
func Setup() {
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// Check returns code, the status of m.Run, or 1 if the tests passed but
// left goroutines running. Idle keep-alive connections of the default HTTP
// client are closed first: they belong to no test.
func Check(code int) int {
	http.DefaultClient.CloseIdleConnections()
	if code != 0 {
		return code
	}
	if leaked := Leaked(settleTime); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "testmain: the tests passed but left %d goroutines running:\n\n%s\n",
			len(leaked), strings.Join(leaked, "\n\n"))
		return 1
	}
	return 0
}

// settleTime is how long Check waits for goroutines that are on their way
// out (a closed server's connection handlers, a cancelled context's
// watchers) before it calls them leaked.
const settleTime = 5 * time.Second

// Leaked returns the stacks of the goroutines other than the caller's and
// the runtime's and testing package's own, waiting up to settle, with
// growing pauses, for them to end. It returns nil when none is left.
func Leaked(settle time.Duration) []string {
	deadline := time.Now().Add(settle)
	pause := time.Millisecond
	for {
		leaked := others()
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// others returns the stacks of the running goroutines, less the caller's
// and those ignorable reports as not the tests' own.
func others() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	stacks := strings.Split(string(buf), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's own
		if s = strings.TrimSpace(s); s != "" && !ignorable(s) {
			out = append(out, s)
		}
	}
	return out
}

// ignorable reports whether the goroutine whose stack s is belongs to the
// runtime or the testing package rather than to a test: the goroutines
// running the tests themselves, the signal handler os/signal starts, and
// the runtime's own workers.
func ignorable(s string) bool {
	_, body, _ := strings.Cut(s, "\n")
	top, _, _ := strings.Cut(body, "(")
	switch {
	case strings.Contains(body, "\ntesting.RunTests("), strings.Contains(body, "\ntesting.(*T).Run("),
		strings.Contains(body, "\ntesting.runFuzzTests("), strings.Contains(body, "\ntesting.runFuzzing("):
		return true
	case strings.HasPrefix(body, "testing.(*T).Run(") || strings.HasPrefix(body, "testing.RunTests("):
		return true
	case strings.HasPrefix(top, "os/signal.signal_recv"), strings.HasPrefix(top, "os/signal.loop"),
		strings.HasPrefix(top, "runtime.ensureSigM"), strings.HasPrefix(top, "runtime.ReadTrace"):
		return true
	case strings.Contains(body, "\nos/signal.loop("), strings.Contains(body, "\nruntime.ensureSigM"):
		return true
	}
	return false
}
