package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelSet is a primary redis-server with one replica, watched by one
// Redis Sentinel (redis-server --sentinel) that fails over to the replica
// when the primary stops answering for DownAfter.
type SentinelSet struct {
	tb testing.TB
	// Master is the name the sentinel monitors the primary by.
	Master string
	// DownAfter is the sentinel's down-after-milliseconds.
	DownAfter time.Duration
	// Primary and Replica are the data servers as started; after a failover
	// Replica is the primary.
	Primary, Replica *Server
	// Sentinel is the sentinel process.
	Sentinel *Server
}

// StartSentinel starts a primary, a replica of it, and a sentinel that
// monitors the primary as master (quorum 1), and returns once the replica
// has synchronized and the sentinel knows of it, so that a failover can
// happen. The processes are killed when tb's test ends.
func StartSentinel(tb testing.TB, master string, downAfter time.Duration) *SentinelSet {
	tb.Helper()
	return StartSentinelAuth(tb, master, downAfter, "", "")
}

// StartSentinelAuth is StartSentinel with passwords: the primary and the
// replica require dataPassword (the replica and the sentinel use it to
// reach the primary), and the sentinel requires sentinelPassword. Empty
// means none.
func StartSentinelAuth(tb testing.TB, master string, downAfter time.Duration, dataPassword, sentinelPassword string) *SentinelSet {
	tb.Helper()
	set := &SentinelSet{tb: tb, Master: master, DownAfter: downAfter}
	var auth []string
	if dataPassword != "" {
		auth = []string{"--requirepass", dataPassword, "--masterauth", dataPassword}
	}
	set.Primary = startServer(tb, &Server{tb: tb, dir: tb.TempDir(), password: dataPassword, args: auth})
	set.Replica = startServer(tb, &Server{tb: tb, dir: tb.TempDir(), password: dataPassword,
		args: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(set.Primary.Port())}, auth...)})
	waitFor(tb, 15*time.Second, "the replica to synchronize", func() bool {
		info, err := set.Replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	ms := strconv.FormatInt(downAfter.Milliseconds(), 10)
	text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s %[3]s\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 1\n", master, set.Primary.Port(), ms)
	if dataPassword != "" {
		text += fmt.Sprintf("sentinel auth-pass %s %s\n", master, dataPassword)
	}
	if sentinelPassword != "" {
		text += fmt.Sprintf("requirepass %s\n", sentinelPassword)
	}
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		tb.Fatalf("redistest: writing %s: %v", conf, err)
	}
	set.Sentinel = startServer(tb, &Server{tb: tb, dir: dir, conf: conf, password: sentinelPassword, args: []string{"--sentinel"}})
	waitFor(tb, 20*time.Second, "the sentinel to discover the replica", func() bool {
		r, err := set.Sentinel.Do("SENTINEL", "REPLICAS", master)
		return err == nil && strings.Contains(r, strconv.Itoa(set.Replica.Port()))
	})
	return set
}

// Addrs returns the sentinel's address, as a client configured for
// Sentinel is given it.
func (set *SentinelSet) Addrs() []string { return []string{set.Sentinel.Addr()} }

// MasterAddr returns the address the sentinel currently names as master.
func (set *SentinelSet) MasterAddr() (string, error) {
	r, err := set.Sentinel.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", set.Master)
	if err != nil {
		return "", err
	}
	host, port, ok := strings.Cut(r, "\n")
	if !ok {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME answered %q", r)
	}
	return host + ":" + port, nil
}

// WaitFailover waits until the sentinel names the replica as master and
// the replica says it is one, failing the test after timeout.
func (set *SentinelSet) WaitFailover(timeout time.Duration) {
	set.tb.Helper()
	waitFor(set.tb, timeout, "the sentinel to promote the replica", func() bool {
		addr, err := set.MasterAddr()
		if err != nil || addr != set.Replica.Addr() {
			return false
		}
		role, err := set.Replica.Do("ROLE")
		return err == nil && strings.HasPrefix(role, "master")
	})
}

// waitFor polls cond every 50ms until it holds, failing tb after timeout.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
