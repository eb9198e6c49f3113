package httprules

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }
