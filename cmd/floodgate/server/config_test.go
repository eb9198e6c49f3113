package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.HTTP.Addr != "127.0.0.1:8080" || c.GRPC.Addr != "127.0.0.1:8081" {
		t.Errorf("default listeners %q %q, want loopback 8080/8081", c.HTTP.Addr, c.GRPC.Addr)
	}
	if c.Store.Type != StoreMemory || c.Rules != "" || c.Shadow {
		t.Errorf("default store %q rules %q shadow %v", c.Store.Type, c.Rules, c.Shadow)
	}
	if c.Arrangement.Interval != 200*time.Millisecond || c.Arrangement.Mode != "delayed" || c.Arrangement.Nodes != 0 ||
		c.Arrangement.membership() == nil || c.Arrangement.Membership.Period != time.Second {
		t.Errorf("default arrangement %+v", c.Arrangement)
	}
	if c.HTTP.TLS.Enabled() || c.GRPC.TLS.Enabled() || len(c.Gateway.Routes) != 0 {
		t.Errorf("default enables TLS or gateway: %+v", c)
	}
}

func TestParseConfigOverlaysDefaults(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "floodgate.yaml")
	c, err := ParseConfig(name, []byte(`
grpc:
  addr: 127.0.0.1:9091
rules: rules.yaml
store:
  type: redis-cluster
  addrs: [127.0.0.1:7000, 127.0.0.1:7001]
arrangement:
  mode: centralized
  deadline: 20ms
gateway:
  routes:
    - prefix: /loan/
      upstream: http://127.0.0.1:9001
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.Addr != "127.0.0.1:9091" || c.HTTP.Addr != "127.0.0.1:8080" {
		t.Errorf("listeners %q %q", c.GRPC.Addr, c.HTTP.Addr)
	}
	if c.Rules != filepath.Join(dir, "rules.yaml") {
		t.Errorf("rules path %q not resolved against the config's directory", c.Rules)
	}
	if c.Store.Type != StoreRedisCluster || len(c.Store.Addrs) != 2 {
		t.Errorf("store %+v", c.Store)
	}
	if c.Arrangement.Mode != "centralized" || c.Arrangement.Deadline != 20*time.Millisecond || c.Arrangement.Interval != 200*time.Millisecond {
		t.Errorf("arrangement %+v", c.Arrangement)
	}
	if len(c.Gateway.Routes) != 1 || c.Gateway.Routes[0].Prefix != "/loan/" {
		t.Errorf("gateway %+v", c.Gateway)
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"http:\n  adr: 1.2.3.4:1\n", "f.yaml:2: unknown field adr"},
		{"store:\n  type: memcached\n", `f.yaml:2: store.type "memcached"`},
		{"store:\n  type: redis\n", "f.yaml:2: store.addrs: store redis needs"},
		{"arrangement:\n  mode: delayed\n  interval: -1s\n", "f.yaml:3: arrangement.interval must be positive"},
		{"arrangement:\n  interval: soon\n", "f.yaml:2:"},
		{"http:\n  addr: nonsense\n", "f.yaml:2: http.addr"},
		{"grpc:\n  tls:\n    cert: a.pem\n", "f.yaml:3: grpc.tls: cert and key must be given together"},
		{"gateway:\n  routes:\n    - prefix: /a\n      upstream: ftp://x\n", "f.yaml:4: gateway route upstream"},
		{"gateway:\n  routes:\n    - prefix: a\n      upstream: http://x\n", "f.yaml:3: gateway route prefix"},
		{"gateway:\n  descriptors: [ip, cookie]\n", `f.yaml:2: gateway.descriptors: "cookie"`},
		{"log:\n  level: loud\n", "f.yaml:2: log.level"},
		{"http: [\n", "f.yaml:"},
		{"max_body_bytes: 0\n", "f.yaml:1: max_body_bytes"},
		{"arrangement:\n  breaker_failures: 0\n", "f.yaml:2: arrangement.breaker_failures"},
		{"arrangement:\n  nodes: -1\n", "f.yaml:2: arrangement.nodes must be 0"},
		{"arrangement:\n  membership:\n    expiry: 1s\n", "f.yaml:3: arrangement.membership.expiry 1s must be at least two periods"},
		{"arrangement:\n  membership:\n    group: a{b}\n", "f.yaml:3: arrangement.membership.group \"a{b}\""},
		{"arrangement:\n  membership:\n    assume: 0\n", "f.yaml:3: arrangement.membership.assume must be at least 1"},
		{"arrangement:\n  membership:\n    perod: 1s\n", "f.yaml:3: unknown field perod"},
		{"store:\n  max_bytes: -1\n", "f.yaml:2: store.max_keys and store.max_bytes must not be negative"},
		{"arrangement:\n  region:\n    others: [{name: eu}]\n", "f.yaml:3: arrangement.region.others needs arrangement.region.name"},
		{"arrangement:\n  region:\n    name: us\n", "f.yaml:3: arrangement.region: regions share counts through Redis"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n", "f.yaml:6: arrangement.region.others lists no other region"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n    others: [{name: eu, store: {type: redis}}]\n", "f.yaml:6: arrangement.region: region \"eu\": its store needs type redis or redis-cluster and addrs"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n    others: [{name: us, store: {type: redis, addrs: [\"h:1\"]}}]\n", "f.yaml:6: arrangement.region: region \"us\" is named twice"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n    others: [{name: eu, store: {type: redis, addrs: [\"h:1\"], prefix: other}}]\n", "f.yaml:6: arrangement.region: region \"eu\": its keys are named as this store's"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n    link_timeout: 1s\n    others: [{name: eu, store: {type: redis, addrs: [\"h:1\"]}}]\n", "f.yaml:6: arrangement.region.exchange must be positive and link_timeout at least two exchanges"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  mode: centralized\n  region:\n    name: us\n    others: [{name: eu, store: {type: redis, addrs: [\"h:1\"]}}]\n", "f.yaml:7: arrangement.region: a region's nodes take mode delayed"},
		{"store:\n  type: redis\n  addrs: [\"127.0.0.1:6379\"]\narrangement:\n  region:\n    name: us\n    others: [{name: e/u, store: {type: redis, addrs: [\"h:1\"]}}]\n", "f.yaml:6: arrangement.region: region \"e/u\": 1 to 64 letters"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := ParseConfig("f.yaml", []byte(c.yaml))
			if err == nil {
				t.Errorf("%q: no error, want %q", c.yaml, c.want)
				return
			}
			if !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%q:\n got %q\nwant prefix %q", c.yaml, err, c.want)
			}
		})
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, err := LoadConfig(filepath.Join(t.TempDir(), "nope.yaml")); !os.IsNotExist(err) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

func TestEmptyConfigFileIsDefaults(t *testing.T) {
	c, err := ParseConfig("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != DefaultConfig().HTTP.Addr {
		t.Fatalf("empty file changed defaults")
	}
}

// The memory store's bounds are read from the config, and the memory
// limit serve sets follows max_bytes.
func TestStoreBounds(t *testing.T) {
	c, err := ParseConfig("f.yaml", []byte("store:\n  max_keys: 1000\n  max_bytes: 1048576\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.MaxKeys != 1000 || c.Store.MaxBytes != 1<<20 {
		t.Fatalf("store bounds %d keys, %d bytes; want 1000 and 1 MiB", c.Store.MaxKeys, c.Store.MaxBytes)
	}
	if got, want := c.Store.MemoryLimit(), int64(1<<20+1<<19+256<<20); got != want {
		t.Fatalf("MemoryLimit = %d, want %d", got, want)
	}
	d := DefaultConfig()
	if d.Store.MaxKeys != 1<<22 || d.Store.MaxBytes != 0 {
		t.Fatalf("default store bounds %d keys, %d bytes; want 4194304 and 0 (sized by FitMemory)", d.Store.MaxKeys, d.Store.MaxBytes)
	}
	d.Store.Type = StoreRedis
	if d.Store.MemoryLimit() != 0 {
		t.Fatal("a Redis store sets a memory limit")
	}
}
