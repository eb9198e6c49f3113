package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedisConfig(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == PasswordEnv {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		name, yaml, env, addr, pass string
	}{
		{"host:port", "store:\n  type: redis\n  addrs: [10.0.0.1:6379]\n", "", "redis://10.0.0.1:6379", ""},
		{"env password", "store:\n  type: redis\n  addrs: [10.0.0.1:6379]\n  username: app\n  db: 4\n", "from-env",
			"redis://app@10.0.0.1:6379/4", "from-env"},
		{"file beats env", "store:\n  type: redis\n  addrs: [10.0.0.1:6379]\n  password_file: pw\n", "from-env",
			"redis://10.0.0.1:6379", "from-file"},
		{"URL beats file", "store:\n  type: redis\n  addrs: [\"redis://:in-url@10.0.0.1:6379/1\"]\n  password_file: pw\n", "",
			"redis://10.0.0.1:6379/1", "in-url"},
		{"tls by key", "store:\n  type: redis\n  addrs: [h:1]\n  tls: {enabled: true}\n", "", "rediss://h:1", ""},
		{"cluster list", "store:\n  type: redis-cluster\n  addrs: [a:1, b:2]\n", "", "redis-cluster://a:1,b:2", ""},
		{"cluster URL", "store:\n  type: redis-cluster\n  addrs: [\"rediss-cluster://a:1,b:2\"]\n", "", "rediss-cluster://a:1,b:2", ""},
		{"sentinel keys", "store:\n  type: redis\n  addrs: [s1:26379, s2:26379]\n  sentinel: {master: main}\n", "",
			"redis-sentinel://s1:26379,s2:26379?master=main", ""},
		{"sentinel URL", "store:\n  type: redis\n  addrs: [\"redis-sentinel://s1:26379/2?master=main\"]\n", "",
			"redis-sentinel://s1:26379/2?master=main", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig(filepath.Join(dir, "f.yaml"), []byte(c.yaml))
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				return
			}
			o, err := cfg.Store.RedisOptions(env(c.env))
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				return
			}
			if got := o.Address(); got != c.addr || o.Password != c.pass {
				t.Errorf("%s: address %q password %q, want %q %q", c.name, got, o.Password, c.addr, c.pass)
			}
			if got := cfg.Store.Address(); got != c.addr {
				t.Errorf("%s: Store.Address() = %q, want %q", c.name, got, c.addr)
			}
		})
	}
}

func TestRedisConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"store:\n  type: redis\n  addrs: [\"redis://u:secret-1@h\"]\n", "f.yaml:3: store: Redis address"},
		{"store:\n  type: redis\n  addrs: [a:1, b:2]\n", "f.yaml:3: store: several addresses"},
		{"store:\n  type: redis\n  addrs: [\"redis-cluster://a:1\"]\n", "f.yaml:3: store: the address is a Redis Cluster URL"},
		{"store:\n  type: redis-cluster\n  addrs: [a:1]\n  db: 2\n", "f.yaml:3: store: db: Redis Cluster"},
		{"store:\n  type: redis\n  addrs: [a:1]\n  tls: {cert: c.pem}\n", "f.yaml:3: store: tls.cert and tls.key"},
		{"store:\n  type: redis\n  addrs: [\"redis://a:1\", b:2]\n", "f.yaml:3: store: \"redis://a:1\" among several"},
		{"store:\n  type: redis\n  addrs: [a:1]\n  password: x\n", "f.yaml:4: unknown field password"},
		{"store:\n  type: redis-cluster\n  addrs: [a:1]\n  sentinel: {master: m}\n", "f.yaml:3: store: Redis Cluster and Sentinel"},
		{"store:\n  type: redis\n  addrs: [a:1]\n  slots_per_limit: 4\n", "f.yaml:3: store: slots_per_limit needs store.type redis-cluster"},
		{"store:\n  type: redis-cluster\n  addrs: [a:1]\n  slots_per_limit: 16385\n", "f.yaml:3: store: slots_per_limit 16385"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, err := ParseConfig("f.yaml", []byte(c.yaml))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%q: error %v, want prefix %q", c.yaml, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret-1") {
				t.Errorf("%q: error shows the password: %v", c.yaml, err)
			}
		})
	}
	cfg, err := ParseConfig("f.yaml", []byte("store:\n  type: redis\n  addrs: [a:1]\n  password_file: /nonexistent/pw\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Store.RedisOptions(os.Getenv); err == nil || !strings.HasPrefix(err.Error(), "store.password_file:") {
		t.Errorf("missing password file: %v", err)
	}
}

// TestRedisConfigSlotsPerLimit: store.slots_per_limit reaches the store's
// options, so a serve configuration can spread a busy limit over a
// cluster's primaries.
func TestRedisConfigSlotsPerLimit(t *testing.T) {
	cfg, err := ParseConfig("f.yaml", []byte("store:\n  type: redis-cluster\n  addrs: [a:1, b:2]\n  slots_per_limit: 64\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.Store.RedisOptions(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o.SlotsPerLimit != 64 {
		t.Errorf("SlotsPerLimit = %d, want 64", o.SlotsPerLimit)
	}
}

func TestStoreSetURL(t *testing.T) {
	var s Store
	for _, c := range []struct{ url, typ string }{
		{"127.0.0.1:6379", StoreRedis},
		{"rediss://h:1/2", StoreRedis},
		{"redis-cluster://a:1,b:2", StoreRedisCluster},
		{"redis-sentinel://a:1?master=m", StoreRedis},
		{"memory", StoreMemory},
	} {
		t.Run(c.url, func(t *testing.T) {
			if err := s.SetURL(c.url); err != nil || s.Type != c.typ {
				t.Errorf("SetURL(%q): type %q, %v; want %q", c.url, s.Type, err, c.typ)
			}
		})
	}
	if err := s.SetURL("redis://:pw-77@h"); err == nil || strings.Contains(err.Error(), "pw-77") {
		t.Errorf("SetURL with a bad address: %v", err)
	}
}
