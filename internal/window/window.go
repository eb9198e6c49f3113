// Package window writes a limit's window the way rule files do, for the
// rule engine, its front ends and the binary.
package window

import (
	"strings"
	"time"
)

// Format writes d as rule files do: 1m, 2h and 1h30m rather than Go's
// 1m0s, 2h0m0s and 1h30m0s; other durations as time.Duration.String
// writes them.
func Format(d time.Duration) string {
	s := d.String()
	if t, ok := strings.CutSuffix(s, "m0s"); ok {
		s = t + "m"
	}
	if t, ok := strings.CutSuffix(s, "h0m"); ok {
		s = t + "h"
	}
	return s
}
