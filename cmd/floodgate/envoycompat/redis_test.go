package envoycompat

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestRedisTypes decides on each kind of Redis the reference reaches
// (REDIS_TYPE single with TLS and a password, cluster, sentinel), each a
// real redis-server on loopback, and checks the count lands in the
// reference's key.
func TestRedisTypes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and a sentinel")
	}
	cases := []struct {
		name string
		env  func(t *testing.T) (map[string]string, func(key string) string)
	}{
		{"single with TLS", func(t *testing.T) (map[string]string, func(string) string) {
			srv, files := redistest.StartTLS(t, true)
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.TLSAddr(),
				"REDIS_TLS": "true", "REDIS_TLS_CACERT": files.CA, "REDIS_TLS_CLIENT_CERT": files.ClientCert,
				"REDIS_TLS_CLIENT_KEY": files.ClientKey}
			return env, func(key string) string {
				v, _ := srv.Do("GET", key)
				return v
			}
		}},
		{"single with a password", func(t *testing.T) (map[string]string, func(string) string) {
			srv := redistest.StartWithPassword(t, "s3cret")
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr(), "REDIS_AUTH": "s3cret"}
			return env, func(key string) string {
				v, _ := srv.Do("GET", key)
				return v
			}
		}},
		{"single on a unix socket", func(t *testing.T) (map[string]string, func(string) string) {
			srv, path := redistest.StartUnix(t)
			env := map[string]string{"REDIS_SOCKET_TYPE": "unix", "REDIS_URL": path}
			return env, func(key string) string {
				v, _ := srv.Do("GET", key)
				return v
			}
		}},
		{"cluster", func(t *testing.T) (map[string]string, func(string) string) {
			c := redistest.StartCluster(t)
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": strings.Join(c.Addrs(), ",")}
			return env, func(key string) string {
				v, _ := c.Servers()[c.Owner(c.Slot(key))].Do("GET", key)
				return v
			}
		}},
		{"sentinel", func(t *testing.T) (map[string]string, func(string) string) {
			set := redistest.StartSentinel(t, "mymaster", 5*time.Second)
			env := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "sentinel",
				"REDIS_URL": "mymaster," + strings.Join(set.Addrs(), ",")}
			return env, func(key string) string {
				v, _ := set.Primary.Do("GET", key)
				return v
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, get := tc.env(t)
			set, err := ParseSettings(mapLookup(env))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadConfig([]File{{Name: "config.test", Text: []byte(testRules)}}, false, set.Wildcards)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			c, err := dialRedis(ctx, set.Redis)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			clk := &clock{}
			clk.t.Store(t0)
			s, err := NewService(set, cfg, c, nil, clk.now)
			if err != nil {
				t.Fatal(err)
			}
			r := call(t, s, 3, desc("generic", "a"), desc("named", "b"))
			if r.Statuses[0].LimitRemaining != 17 || r.Statuses[1].LimitRemaining != 2 {
				t.Fatalf("%v", r)
			}
			w := strconv.FormatInt(t0-10, 10)
			if v := get("test_generic_a_" + w); v != "3" {
				t.Fatalf("GET test_generic_a_%s = %q, want 3", w, v)
			}
		})
	}
}
