package server

import (
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/ratelog"
)

// errorLogEvery is how often, at most, one kind of net/http error line is
// logged on a listener.
const errorLogEvery = 10 * time.Second

// maxErrorKinds bounds the kinds of line errorLog keeps a limiter for;
// past it, lines share one.
const maxErrorKinds = 64

// errorLog returns the ErrorLog of the HTTP server of the listener called
// name. net/http and its HTTP/2 server write a line there for each failed
// TLS handshake, each connection that sends garbage, each request with a
// semicolon in its query: a client can make thousands a second. Each kind
// of line (its text before " from " or the first ": " after the prefix) is
// logged at WARN at most once per errorLogEvery, with the number of lines
// it stands for and the last of them.
func (s *Server) errorLog(name string) *log.Logger {
	return log.New(&errorLines{log: s.log, listener: name, kinds: map[string]*ratelog.Every{}}, "", 0)
}

// errorLines spaces out the lines of one listener's ErrorLog.
type errorLines struct {
	log      *slog.Logger
	listener string
	mu       sync.Mutex
	kinds    map[string]*ratelog.Every
}

func (e *errorLines) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	kind := errorKind(line)
	e.mu.Lock()
	every := e.kinds[kind]
	if every == nil {
		if len(e.kinds) >= maxErrorKinds {
			kind = "other"
			every = e.kinds[kind]
		}
		if every == nil {
			every = ratelog.New(errorLogEvery)
			e.kinds[kind] = every
		}
	}
	e.mu.Unlock()
	if n, due := every.Add(); due {
		e.log.Warn(kind, "listener", e.listener, "count", n, "every", errorLogEvery, "last", line)
	}
	return len(p), nil
}

// errorKind is what a net/http error line is about, without the client's
// address or the error's details: "http: TLS handshake error" for "http:
// TLS handshake error from 10.0.0.1:4242: EOF".
func errorKind(line string) string {
	k := line
	if i := strings.Index(k, " from "); i > 0 {
		k = k[:i]
	} else {
		rest := k
		if i := strings.Index(rest, ": "); i > 0 && i < 8 { // past "http: " or "http2: "
			rest = rest[i+2:]
		}
		if i := strings.Index(rest, ": "); i > 0 {
			k = k[:len(k)-len(rest)+i]
		}
	}
	if len(k) > 80 {
		k = k[:80]
	}
	return k
}
