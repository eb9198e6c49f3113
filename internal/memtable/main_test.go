package memtable

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/testkit/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
