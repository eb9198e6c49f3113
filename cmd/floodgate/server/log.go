package server

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// parseLevel parses a log level name: debug, info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q: want debug, info, warn or error", s)
}

// NewLogger returns the structured logger c describes, writing to w.
func NewLogger(c Log, w io.Writer) (*slog.Logger, error) {
	level, err := parseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.Format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", c.Format)
}
