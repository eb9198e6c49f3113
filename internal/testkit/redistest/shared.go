package redistest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// StartShared starts a server for a whole test package, from TestMain,
// where no testing.TB exists yet:
//
//	func TestMain(m *testing.M) {
//		srv, stop, err := redistest.StartShared()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		shared = srv
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
// stop kills the server and removes its directory. A method of the server
// that fails later (Restart, Pause) panics instead of failing a test. When
// redis-server is not installed, err wraps ErrNotInstalled: the package's
// tests that need the server should then skip.
func StartShared() (s *Server, stop func(), err error) {
	tb := &packageTB{}
	defer tb.recover(&err)
	s = Start(tb)
	return s, tb.stop, nil
}

// StartSharedCluster is StartShared for a three-master cluster.
func StartSharedCluster() (c *Cluster, stop func(), err error) {
	tb := &packageTB{}
	defer tb.recover(&err)
	c = StartCluster(tb)
	return c, tb.stop, nil
}

// packageTB is the testing.TB of a package-wide server: it collects
// cleanups and turns failures into panics. Methods not overridden are not
// called by this package.
type packageTB struct {
	testing.TB
	dirs     []string
	cleanups []func()
}

type (
	fatal string
	skip  string
)

// ErrNotInstalled is wrapped by StartShared's error when redis-server or
// redis-cli is missing (and the integration tier is not running).
var ErrNotInstalled = errors.New("redistest: not installed")

func (p *packageTB) Helper()                   {}
func (p *packageTB) Cleanup(f func())          { p.cleanups = append(p.cleanups, f) }
func (p *packageTB) Logf(f string, a ...any)   { fmt.Fprintf(os.Stderr, f+"\n", a...) }
func (p *packageTB) Fatalf(f string, a ...any) { panic(fatal(fmt.Sprintf(f, a...))) }
func (p *packageTB) Fatal(a ...any)            { panic(fatal(fmt.Sprint(a...))) }
func (p *packageTB) Skip(a ...any)             { panic(skip(fmt.Sprint(a...))) }

func (p *packageTB) TempDir() string {
	d, err := os.MkdirTemp("", "redistest")
	if err != nil {
		p.Fatalf("redistest: %v", err)
	}
	p.dirs = append(p.dirs, d)
	return d
}

func (p *packageTB) stop() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
	p.cleanups = nil
	for _, d := range p.dirs {
		os.RemoveAll(d)
	}
	p.dirs = nil
}

// recover turns a failure during start into an error, after stopping what
// had started.
func (p *packageTB) recover(err *error) {
	if r := recover(); r != nil {
		switch f := r.(type) {
		case fatal:
			p.stop()
			*err = fmt.Errorf("%s", string(f))
		case skip:
			p.stop()
			*err = fmt.Errorf("%w: %s", ErrNotInstalled, string(f))
		default:
			panic(r)
		}
	}
}
