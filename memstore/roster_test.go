package memstore

import (
	"testing"

	"github.com/floodgate-dev/floodgate/internal/testkit/rostertest"
)

func TestRoster(t *testing.T) { rostertest.Check(t, New(Options{}), "", 0) }
