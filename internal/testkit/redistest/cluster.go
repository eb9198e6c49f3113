package redistest

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters, with or without one
// replica each, every node a Server on loopback. Slots are split evenly by
// redis-cli --cluster create.
type Cluster struct {
	tb       testing.TB
	servers  []*Server // the masters as created
	ids      []string  // node IDs, parallel to servers
	replicas []*Server
}

// StartCluster starts three redis-server processes in cluster mode, joins
// them into one cluster with redis-cli, and returns once every node reports
// cluster_state:ok. The processes are killed when tb's test ends.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return startCluster(tb, 0, 5*time.Second)
}

// StartClusterWithReplicas is StartCluster with one replica per master and
// the given cluster-node-timeout: when a master stops answering for that
// long, its replica takes over. Servers returns the masters as created;
// Replicas the others.
func StartClusterWithReplicas(tb testing.TB, nodeTimeout time.Duration) *Cluster {
	tb.Helper()
	return startCluster(tb, 1, nodeTimeout)
}

func startCluster(tb testing.TB, replicas int, nodeTimeout time.Duration) *Cluster {
	tb.Helper()
	cli := lookBinary(tb, "redis-cli")
	c := &Cluster{tb: tb}
	var nodes []*Server
	for i := 0; i < 3*(1+replicas); i++ {
		// The cluster bus needs a second free port; by default it is port+10000,
		// which may be out of range or taken, so name it explicitly.
		bus, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: finding a free cluster bus port: %v", err)
		}
		nodes = append(nodes, start(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
		}))
	}
	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range nodes {
		role, err := s.Do("ROLE")
		if err != nil {
			tb.Fatalf("redistest: ROLE on %s: %v", s.Addr(), err)
		}
		if !strings.HasPrefix(role, "master") {
			c.replicas = append(c.replicas, s)
			continue
		}
		id, err := s.Do("CLUSTER", "MYID")
		if err != nil {
			tb.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr(), err)
		}
		c.servers = append(c.servers, s)
		c.ids = append(c.ids, id)
	}
	if len(c.servers) != 3 || len(c.replicas) != 3*replicas {
		tb.Fatalf("redistest: cluster create made %d masters and %d replicas, want 3 and %d", len(c.servers), len(c.replicas), 3*replicas)
	}
	c.waitOK()
	if replicas > 0 {
		c.waitReplicasInSync()
	}
	return c
}

// waitReplicasInSync waits until every replica reports its link to its
// master up, so a failover has a replica to promote.
func (c *Cluster) waitReplicasInSync() {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range c.replicas {
		for {
			info, err := r.Do("INFO", "replication")
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				c.tb.Fatalf("redistest: replica %s not in sync within 30s: %v\n%s", r.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Replicas returns the replicas of a cluster started with replicas.
func (c *Cluster) Replicas() []*Server { return c.replicas }

// waitOK waits until every node reports cluster_state:ok and agrees on
// the owner of every slot.
func (c *Cluster) waitOK() {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, s := range c.servers {
			info, err := s.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			if out, err := exec.Command(lookBinary(c.tb, "redis-cli"),
				"--cluster", "check", c.servers[0].Addr()).CombinedOutput(); err != nil ||
				!strings.Contains(string(out), "All 16384 slots covered") ||
				strings.Contains(string(out), "[WARNING]") ||
				strings.Contains(string(out), "[ERR]") {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: cluster did not reach cluster_state:ok within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs returns the masters' addresses, as created.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.servers))
	for i, s := range c.servers {
		a[i] = s.Addr()
	}
	return a
}

// Servers returns the masters, for fault injection on one node.
func (c *Cluster) Servers() []*Server { return c.servers }

// Slot returns the hash slot of key, as the cluster computes it.
func (c *Cluster) Slot(key string) int {
	c.tb.Helper()
	r, err := c.servers[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
	}
	n, err := strconv.Atoi(r)
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER KEYSLOT answered %q", r)
	}
	return n
}

// Owner returns the index in Servers of the master that serves slot.
func (c *Cluster) Owner(slot int) int {
	c.tb.Helper()
	r, err := c.servers[0].Do("CLUSTER", "NODES")
	if err != nil {
		c.tb.Fatalf("redistest: CLUSTER NODES: %v", err)
	}
	// One line per node: id addr@bus flags master ping pong epoch state slots...
	for _, line := range strings.Split(r, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		for _, rg := range f[8:] {
			if strings.HasPrefix(rg, "[") {
				continue // a migration in progress, not ownership
			}
			lo, hi, found := strings.Cut(rg, "-")
			if !found {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || slot < l || slot > h {
				continue
			}
			for k, id := range c.ids {
				if id == f[0] {
					return k
				}
			}
		}
	}
	c.tb.Fatalf("redistest: no owner for slot %d in CLUSTER NODES:\n%s", slot, r)
	return -1
}

// BeginMigration marks slot as migrating from its owner to the master at
// index to, without moving any key: from now on the owner answers ASK for
// keys of the slot it no longer holds. Move keys with MigrateKeys and end
// with FinishMigration. It returns the index of the source master.
func (c *Cluster) BeginMigration(slot, to int) (from int) {
	c.tb.Helper()
	from = c.Owner(slot)
	if from == to {
		c.tb.Fatalf("redistest: slot %d is already served by node %d", slot, to)
	}
	sl := strconv.Itoa(slot)
	c.must(c.servers[to], "CLUSTER", "SETSLOT", sl, "IMPORTING", c.ids[from])
	c.must(c.servers[from], "CLUSTER", "SETSLOT", sl, "MIGRATING", c.ids[to])
	return from
}

// MigrateKeys moves the named keys (of a slot under migration) from master
// from to master to with MIGRATE.
func (c *Cluster) MigrateKeys(from, to int, keys ...string) {
	c.tb.Helper()
	if len(keys) == 0 {
		return
	}
	args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(c.servers[to].Port()), "", "0", "5000", "KEYS"}
	c.must(c.servers[from], append(args, keys...)...)
}

// FinishMigration moves the slot's remaining keys from master from to
// master to and assigns the slot to the target on every master, ending a
// migration started with BeginMigration. Afterwards clients that still
// address the old owner get MOVED.
func (c *Cluster) FinishMigration(slot, from, to int) {
	c.tb.Helper()
	sl := strconv.Itoa(slot)
	for {
		r, err := c.servers[from].Do("CLUSTER", "GETKEYSINSLOT", sl, "100")
		if err != nil {
			c.tb.Fatalf("redistest: CLUSTER GETKEYSINSLOT: %v", err)
		}
		if r == "" {
			break
		}
		c.MigrateKeys(from, to, strings.Split(r, "\n")...)
	}
	c.must(c.servers[to], "CLUSTER", "SETSLOT", sl, "NODE", c.ids[to])
	c.must(c.servers[from], "CLUSTER", "SETSLOT", sl, "NODE", c.ids[to])
	for i, s := range c.servers {
		if i != from && i != to {
			c.must(s, "CLUSTER", "SETSLOT", sl, "NODE", c.ids[to])
		}
	}
}

func (c *Cluster) must(s *Server, args ...string) string {
	c.tb.Helper()
	r, err := s.Do(args...)
	if err != nil {
		c.tb.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), s.Addr(), err)
	}
	return r
}
