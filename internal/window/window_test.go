package window

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{time.Minute, "1m"},
		{2 * time.Hour, "2h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Nanosecond, "1ns"},
		{0, "0s"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if got := Format(c.d); got != c.want {
				t.Errorf("Format(%v) = %q, want %q", c.d, got, c.want)
			}
		})
	}
}
