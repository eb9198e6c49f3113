package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// The scale test runs real `floodgate serve` processes against one
// redis-server while an autoscaler would add and remove them. Its window
// and phase lengths are short by default (the suite's run); FLOODGATE_SCALE_WINDOW
// and FLOODGATE_SCALE_PERIOD make it the long run that
// scripts/membership-scale prints figures from.

func scaleDuration(t *testing.T, env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", env, v)
	}
	return d
}

// scaleNode is one `floodgate serve` process.
type scaleNode struct {
	cmd    *exec.Cmd
	http   string
	client *http.Client
	done   chan struct{} // closed when the process has exited
}

// scaleFleet starts and stops nodes with one configuration.
type scaleFleet struct {
	t      *testing.T
	bin    string
	dir    string
	config string // the config file's text; %s is the http address
	mu     sync.Mutex
	nodes  []*scaleNode
	all    []*scaleNode
	seq    int
}

var listeningRE = regexp.MustCompile(`msg=listening listener=http addr=(\S+)`)

// add starts k nodes and waits until every one is ready.
func (f *scaleFleet) add(k int) {
	t := f.t
	var started []*scaleNode
	for range k {
		f.seq++
		path := filepath.Join(f.dir, fmt.Sprintf("node%d.yaml", f.seq))
		if err := os.WriteFile(path, []byte(f.config), 0o644); err != nil {
			t.Fatal(err)
		}
		n := &scaleNode{cmd: exec.Command(f.bin, "serve", "--config", path), done: make(chan struct{}),
			client: &http.Client{Timeout: 10 * time.Second}}
		stderr, err := n.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		f.all = append(f.all, n)
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case addr <- m[1]:
					default:
					}
				}
			}
			n.cmd.Wait()
			close(n.done)
		}()
		select {
		case n.http = <-addr:
		case <-n.done:
			t.Fatal("a node exited before listening")
		case <-time.After(time.Minute):
			t.Fatal("a node did not listen within a minute")
		}
		started = append(started, n)
	}
	for _, n := range started {
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := n.client.Get(n.http + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within a minute", n.http)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	f.mu.Lock()
	f.nodes = append(f.nodes, started...)
	f.mu.Unlock()
}

// stop takes the last k nodes out of the clients' rotation and stops them
// as an autoscaler does (SIGTERM), waiting until they have exited.
func (f *scaleFleet) stop(k int) {
	f.mu.Lock()
	gone := slices.Clone(f.nodes[len(f.nodes)-k:])
	f.nodes = f.nodes[:len(f.nodes)-k]
	f.mu.Unlock()
	for _, n := range gone {
		n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range gone {
		select {
		case <-n.done:
		case <-time.After(time.Minute):
			f.t.Fatal("a node did not stop within a minute of SIGTERM")
		}
	}
}

// kill stops every process the fleet started.
func (f *scaleFleet) kill() {
	for _, n := range f.all {
		n.cmd.Process.Kill()
		<-n.done
	}
	f.all, f.nodes = nil, nil
}

// live returns the nodes in the rotation now.
func (f *scaleFleet) live() []*scaleNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nodes)
}

// scaleCall is one check a client made: when it was sent and answered.
type scaleCall struct {
	sent, answered time.Time
	allowed        bool
}

// scaleClient sends checks for one key at a rate, each to the next live
// node in turn. It never catches up on a late call: a call sent late is
// followed by the next one a whole interval later, so it sends no more
// than its rate in any stretch of time.
type scaleClient struct {
	key   string
	rate  float64
	mu    sync.Mutex // calls, while the client runs
	calls []scaleCall
	err   error
}

func (c *scaleClient) run(ctx context.Context, f *scaleFleet, wg *sync.WaitGroup) {
	defer wg.Done()
	every := time.Duration(float64(time.Second) / c.rate)
	body := fmt.Sprintf(`{"domain":"scale","descriptors":[{"entries":[{"key":"client","value":%q}]}]}`, c.key)
	next := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		nodes := f.live()
		n := nodes[i%len(nodes)]
		sent := time.Now()
		next = sent.Add(every)
		resp, err := n.client.Post(n.http+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			// A node taken out of the rotation while the call was on its
			// way closes its connections: not an error, as a load
			// balancer would send the call elsewhere.
			if ctx.Err() == nil && c.err == nil && slices.Contains(f.live(), n) {
				c.err = err
			}
			continue
		}
		var out struct {
			Allowed bool `json:"allowed"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil {
			c.err = err
			continue
		}
		c.mu.Lock()
		c.calls = append(c.calls, scaleCall{sent, time.Now(), out.Allowed})
		c.mu.Unlock()
	}
}

// allowedSoFar counts the client's allowed calls, while it runs.
func (c *scaleClient) allowedSoFar() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, x := range c.calls {
		if x.allowed {
			n++
		}
	}
	return n
}

// rejected counts the client's rejected calls.
func (c *scaleClient) rejected() int {
	n := 0
	for _, x := range c.calls {
		if !x.allowed {
			n++
		}
	}
	return n
}

// busiest returns, over every window-long stretch, the most allowed calls
// surely decided in it (sent and answered within it: the node decided in
// between) and the most that may have been (sent before its end and
// answered after its start).
func (c *scaleClient) busiest(window time.Duration) (sure, may int) {
	var allowed []scaleCall
	for _, x := range c.calls {
		if x.allowed {
			allowed = append(allowed, x)
		}
	}
	for _, a := range allowed {
		from, to := a.sent, a.sent.Add(window) // stretches starting at a send
		s, m := 0, 0
		for _, b := range allowed {
			if !b.sent.Before(from) && !b.answered.After(to) {
				s++
			}
			if b.sent.Before(to) && !b.answered.Before(from) {
				m++
			}
		}
		sure, may = max(sure, s), max(may, m)
	}
	return sure, may
}

// TestScaleLiveNodes: `floodgate serve` processes on one redis-server,
// counting each other through it (arrangement.nodes: 0).
//
// Split, 3 -> 8 -> 2 nodes under steady traffic: a client at 60% of its
// limit is never rejected, but while stopping nodes drain (they count as
// live until they announce their departure, a period before the others
// see it), and a greedy client's busiest window holds at
// most (1+e)·L plus, for the 5 newcomers, their first unit and what they
// take in the period before the others see them: 5·(1 + (L/8)·(P/W)).
//
// Delayed, failure: local, 8 nodes, a limit of 100 a minute: Redis is
// killed with about 20 used; the greedy client's requests accepted from
// the start of the key to the end of the outage (5 s) are at most (1+e)·L plus what it sends during the
// interval before the outage and until the breaker opens, R·(I + T), not
// the 8/3 of the allowance left that nodes configured for 3 would grant.
func TestScaleLiveNodes(t *testing.T) {
	bin := floodgateBinary(t)
	window := scaleDuration(t, "FLOODGATE_SCALE_WINDOW", 2*time.Second)
	period := scaleDuration(t, "FLOODGATE_SCALE_PERIOD", window/15)
	const limit = 100
	redis := redistest.Start(t)
	dir := t.TempDir()
	// config writes the rules (limit per window) and returns the config of
	// a node in mode.
	config := func(mode string, window time.Duration) string {
		rules := filepath.Join(dir, mode+".yaml")
		err := os.WriteFile(rules, []byte(fmt.Sprintf(`domain: scale
rules:
  - name: per-client
    match: {client: "*"}
    count_by: [client]
    limit: %d
    window: %s
    failure: local
`, limit, window)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`http: {addr: "127.0.0.1:0"}
grpc: {addr: "off"}
rules: %s
store: {type: redis, addrs: [%s], prefix: fgscale%s}
arrangement:
  mode: %s
  sync_deadline: 200ms
  breaker_failures: 2
  membership: {period: %s, expiry: %s}
log: {level: info}
`, rules, redis.Addr(), mode, mode, period, 3*period)
	}

	t.Run("split", func(t *testing.T) {
		f := &scaleFleet{t: t, bin: bin, dir: dir, config: config("split", window)}
		defer f.kill()
		f.add(3)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		steady := &scaleClient{key: "steady", rate: 0.6 * limit / window.Seconds()}
		greedy := &scaleClient{key: "greedy", rate: 2 * limit / window.Seconds()}
		wg.Add(2)
		go steady.run(ctx, f, &wg)
		go greedy.run(ctx, f, &wg)
		time.Sleep(2 * window)
		f.add(5)
		time.Sleep(2 * window)
		// A stopping node counts as live until it has drained its
		// listeners and announced its departure: until then, and for a
		// period after, the two left keep their eighth of the limit
		// (shares smaller, never larger) while they take all the traffic.
		drainFrom := time.Now()
		f.stop(6)
		drainTo := time.Now().Add(2 * period)
		time.Sleep(2 * window)
		cancel()
		wg.Wait()
		for _, c := range []*scaleClient{steady, greedy} {
			if c.err != nil {
				t.Fatalf("%s client: %v", c.key, c.err)
			}
		}
		sure, may := greedy.busiest(window)
		newcomerUnits := int(1 + (limit/8)*(period.Seconds()/window.Seconds()) + 0.999)
		bound := int(1.05*limit) + 5*newcomerUnits
		draining := 0
		for _, x := range steady.calls {
			if !x.allowed && !x.sent.Before(drainFrom) && x.sent.Before(drainTo) {
				draining++
			}
		}
		t.Logf("split 3 -> 8 -> 2, limit %d per %v, beats every %v: steady client (%.0f/s) rejected %d of %d (%d while 6 nodes drained, %v); greedy (%.0f/s) allowed %d of %d, busiest window %d to %d (bound %d)",
			limit, window, period, steady.rate, steady.rejected(), len(steady.calls), draining, drainTo.Sub(drainFrom)-2*period,
			greedy.rate, len(greedy.calls)-greedy.rejected(), len(greedy.calls), sure, may, bound)
		if r := steady.rejected() - draining; r != 0 {
			t.Errorf("the client at 60%% of its limit was rejected %d times outside the drain", r)
		}
		if sure > bound {
			t.Errorf("greedy client: %d allowed within one window, above %d", sure, bound)
		}
	})

	t.Run("outage", func(t *testing.T) {
		f := &scaleFleet{t: t, bin: bin, dir: dir, config: config("delayed", time.Minute)}
		defer f.kill()
		f.add(8)
		time.Sleep(3 * period) // every node has seen the 8
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		greedy := &scaleClient{key: "outage", rate: 50}
		wg.Add(1)
		go greedy.run(ctx, f, &wg)
		time.Sleep(400 * time.Millisecond) // about 20 of 100 used
		redis.Kill()
		// Long enough for nodes that took 8 for 3 to show: they would
		// grant 8/3 of the 80 left, above the bound.
		time.Sleep(5 * time.Second)
		cancel()
		wg.Wait()
		redis.Restart()
		if greedy.err != nil {
			t.Fatalf("client: %v", greedy.err)
		}
		allowed := len(greedy.calls) - greedy.rejected()
		// I = 200ms; T: two failed syncs, each at most an interval and
		// its 200ms deadline apart.
		bound := int(1.05*limit + greedy.rate*(0.2+2*0.4))
		t.Logf("delayed, failure: local, 8 nodes, Redis killed after 0.4 s at %.0f/s: %d allowed of %d sent (bound %d)",
			greedy.rate, allowed, len(greedy.calls), bound)
		if allowed > bound {
			t.Errorf("%d allowed in a window with Redis down, above %d", allowed, bound)
		}
	})
}
