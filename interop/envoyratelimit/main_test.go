package envoyratelimit

import (
	"fmt"
	"os"
	"testing"

	logger "github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	// The reference logs at info level before it applies LOG_LEVEL.
	logger.SetLevel(logger.ErrorLevel)
	code := m.Run()
	if err := recorder.write(); err != nil {
		fmt.Fprintln(os.Stderr, "writing the recording:", err)
		code = 1
	}
	os.Exit(code)
}
