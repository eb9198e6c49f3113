// Package redistest starts real redis-server processes on loopback ports for
// tests: a single server, or a three-master Redis Cluster. It never mocks
// Redis; tests that use it need redis-server and redis-cli on PATH
// (Debian: apt-get install -y redis-server redis-tools), and are skipped,
// saying so, where they are missing (failed in the integration tier).
//
// Servers run with no persistence in a temporary directory and are killed
// when the test (or benchmark) that started them ends. The fault-injection
// methods act on the real process: Kill sends SIGKILL, Pause and Resume send
// SIGSTOP and SIGCONT.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/testtier"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	tb   testing.TB
	dir  string
	port int
	args []string // extra arguments, kept for Restart
	// conf, if set, is a configuration file passed before every other
	// argument (a sentinel needs one it can rewrite).
	conf string
	// password is sent with AUTH by Do and the start-up PING.
	password string
	// tlsPort is the TLS listener's port, 0 without TLS.
	tlsPort int

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has been waited for
	paused bool
}

// Start starts a redis-server on a free loopback port and returns once it
// answers PING. The server is killed when tb's test ends. If redis-server
// is not installed, Start skips the test (fails it in the integration tier).
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb, nil)
}

func start(tb testing.TB, extra []string) *Server {
	tb.Helper()
	return startServer(tb, &Server{tb: tb, dir: tb.TempDir(), args: extra})
}

// startServer starts s, set up but for its port, on a free port.
func startServer(tb testing.TB, s *Server) *Server {
	tb.Helper()
	bin := lookBinary(tb, "redis-server")
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: finding a free port: %v", err)
		}
		s.port = port
		if err := s.launch(bin); err != nil {
			lastErr = err
			continue // most likely another process took the port meanwhile
		}
		tb.Cleanup(s.stop)
		return s
	}
	tb.Fatalf("redistest: redis-server did not start after 5 attempts: %v", lastErr)
	return nil
}

// lookBinary returns the path of name. When it is not installed, it skips
// tb with installation advice, or fails tb in the integration tier
// (scripts/test installs both binaries, so a miss there is a real fault).
func lookBinary(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		msg := fmt.Sprintf("redistest: %s not found on PATH (%v); install it, e.g. "+
			"`apt-get install -y redis-server redis-tools` on Debian/Ubuntu or "+
			"`brew install redis` on macOS", name, err)
		if testtier.Integration() {
			tb.Fatal(msg)
		}
		tb.Skip(msg + "; skipping the test")
	}
	return p
}

// freePort asks the kernel for a free loopback port. The port is released
// before use, so a caller must retry if the server then fails to bind.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process on s.port and waits for PING.
func (s *Server) launch(bin string) error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", "redis.log",
	}
	args = append(args, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, s.logTail())
		default:
		}
		if err := s.ping(200 * time.Millisecond); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s",
				s.port, startTimeout, s.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	s.cmd, s.done, s.paused = cmd, done, false
	s.mu.Unlock()
	return nil
}

// logTail returns the end of the server's log file, for error messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.dir + "/redis.log")
	if err != nil || len(b) == 0 {
		return "(no log)"
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Kill sends SIGKILL to the server and waits for it to exit, as a crash
// would. Restart brings it back on the same port, with empty data.
func (s *Server) Kill() {
	s.tb.Helper()
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.paused = nil, false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Restart kills the server if it runs and starts it again on the same port
// and directory. It fails the test if the server does not come back.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	bin := lookBinary(s.tb, "redis-server")
	var err error
	// The port can linger briefly after a kill; retry for a few seconds.
	for deadline := time.Now().Add(startTimeout); ; {
		if err = s.launch(bin); err == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restarting redis-server on port %d: %v", s.port, err)
}

// Pause stops the server process with SIGSTOP: connections stay open but
// nothing is answered, like a hung or overloaded server. Resume undoes it;
// the test's cleanup also resumes a paused server before killing it.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal("Pause", syscall.SIGSTOP, true)
}

// Resume continues a server stopped by Pause.
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal("Resume", syscall.SIGCONT, false)
}

// signal sends sig to the running server for the method op and records
// whether the server is now paused.
func (s *Server) signal(op string, sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: %s: server on port %d is not running", op, s.port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %s: %v", op, err)
	}
	s.paused = paused
}

// Do sends one command to the server on a fresh connection and returns the
// reply in redis-cli's raw form (one line per element for arrays). It is
// meant for test setup and checks, not for speed.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.Addr(), s.password, 5*time.Second, args...)
}

// FlushAll removes every key on the server.
func (s *Server) FlushAll() {
	s.tb.Helper()
	if _, err := s.Do("FLUSHALL"); err != nil {
		s.tb.Fatalf("redistest: FLUSHALL on %s: %v", s.Addr(), err)
	}
}

// stop kills the process at the end of the test.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot exit otherwise on some kernels
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// ping sends PING and expects PONG.
func (s *Server) ping(timeout time.Duration) error {
	r, err := do(s.Addr(), s.password, timeout, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

// do is a minimal RESP2 client: one command, one reply, one connection,
// after AUTH if password is set.
func do(addr, password string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(c)
	if password != "" {
		if _, err := roundTrip(c, r, "AUTH", password); err != nil {
			return "", err
		}
	}
	return roundTrip(c, r, args...)
}

// roundTrip sends one command on c and reads its reply from r.
func roundTrip(c net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	var lines []string
	if err := readReply(r, &lines); err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}

// readReply reads one RESP2 reply, appending its scalar parts to out.
func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// StartUnix is Start with the server also listening on a Unix socket in a
// temporary directory, whose path it returns.
func StartUnix(tb testing.TB) (*Server, string) {
	tb.Helper()
	dir, err := os.MkdirTemp("", "rt")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "redis.sock") // short: socket paths are limited to about 100 bytes
	return start(tb, []string{"--unixsocket", path, "--unixsocketperm", "700"}), path
}
