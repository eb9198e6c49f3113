package envoyratelimit

import (
	"os"
	"testing"

	logger "github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	// The reference logs at info level before it applies LOG_LEVEL.
	logger.SetLevel(logger.ErrorLevel)
	os.Exit(m.Run())
}
