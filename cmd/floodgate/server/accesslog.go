package server

import (
	"log/slog"
	"net/http"
	"time"
)

// accessLog logs every request at debug level: listener, method, path,
// status, bytes and duration. When debug is off it costs one level check.
func accessLog(listener string, h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !log.Enabled(r.Context(), slog.LevelDebug) {
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			log.Debug("request", "listener", listener, "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "bytes", rec.bytes, "duration", time.Since(start), "remote", r.RemoteAddr)
		}()
		h.ServeHTTP(rec, r)
	})
}

// statusRecorder remembers the status code and body size of a response.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	n, err := s.ResponseWriter.Write(p)
	s.bytes += int64(n)
	return n, err
}

// Flush passes flushes through, for streamed upstream responses.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
