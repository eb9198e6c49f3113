package server

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/floodgate-dev/floodgate/internal/testmain"
)

// The gRPC listener's call admission (internal/grpcguard) keeps a sweep
// goroutine running after its server has stopped while it still counts
// calls as waiting for their message; it has no Close. Known and ignored
// here until the sweep ends with its server; every other goroutine a test
// leaves running fails the package.
func TestMain(m *testing.M) {
	testmain.Run(m, goleak.IgnoreTopFunction("github.com/floodgate-dev/floodgate/internal/grpcguard.(*Admission).sweep"))
}
