package ctxsleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleep(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(done, 0); err != nil {
		t.Errorf("Sleep(done, 0) = %v, want nil at once", err)
	}
	if err := Sleep(done, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(done, 1h) = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(background, 1ms) = %v, want nil", err)
	}
}
