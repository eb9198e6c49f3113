// Package testmain is the TestMain of the packages whose code starts
// goroutines: it discards what the code logs to the default logger (a
// failing test says what went wrong through t.Log) and, once every test
// has passed, fails the package if a goroutine is left running
// (go.uber.org/goleak), printing the leaked goroutines' stacks.
//
//	func TestMain(m *testing.M) { testmain.Run(m) }
package testmain

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Run runs m's tests between Setup and Check and exits with their status.
func Run(m *testing.M, opts ...goleak.Option) {
	Setup()
	os.Exit(Check(m.Run(), opts...))
}

// Setup discards the default logger's output, for a TestMain that does
// more than Run.
func Setup() {
	slog.SetDefault(slog.New(slog.DiscardHandler))
}

// Check returns code, the status of m.Run, or 1 if the tests passed but
// left goroutines running. Idle keep-alive connections of the default HTTP
// client are closed first: they belong to no test.
func Check(code int, opts ...goleak.Option) int {
	http.DefaultClient.CloseIdleConnections()
	if code != 0 {
		return code
	}
	if err := goleak.Find(opts...); err != nil {
		fmt.Fprintf(os.Stderr, "goleak: the tests passed but left goroutines running: %v\n", err)
		return 1
	}
	return 0
}
