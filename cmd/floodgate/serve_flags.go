package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/server"
)

// serveOverrides are the serve flags that override the configuration file;
// empty ones leave it alone.
type serveOverrides struct {
	http, grpc, gateway, store string
}

// apply writes the overrides into cfg, checking each value and naming its
// flag when one is wrong.
func (ov serveOverrides) apply(cfg *server.Config) error {
	for _, l := range []struct {
		flag, val string
		off       bool
		dst       *string
	}{
		{"--http", ov.http, true, &cfg.HTTP.Addr},
		{"--grpc", ov.grpc, true, &cfg.GRPC.Addr},
		{"--gateway", ov.gateway, false, &cfg.Gateway.Addr},
	} {
		if l.val == "" {
			continue
		}
		if !(l.off && l.val == "off") {
			if err := checkListenAddr(l.val); err != nil {
				return fmt.Errorf("%s: %v", l.flag, err)
			}
		}
		*l.dst = l.val
	}
	if ov.store != "" {
		if err := applyStore(&cfg.Store, ov.store); err != nil {
			return fmt.Errorf("--store: %v", err)
		}
	}
	return nil
}

// applyStore sets st from a --store value: "memory", a Redis URL (passed to
// the Redis store as it is), or host:port addresses (several, separated by
// commas, for a Redis Cluster, as does a config that names redis-cluster).
func applyStore(st *server.Store, v string) error {
	switch {
	case v == server.StoreMemory:
		st.Type, st.Addrs = server.StoreMemory, nil
		return nil
	case strings.HasPrefix(v, "redis://") || strings.HasPrefix(v, "rediss://"):
		if st.Type != server.StoreRedisCluster {
			st.Type = server.StoreRedis
		}
		st.Addrs = []string{v}
		return nil
	case strings.Contains(v, "://"):
		return fmt.Errorf("%q: want memory, host:port, redis://[user:pass@]host:port[/db] or rediss://...", redactURL(v))
	}
	addrs := strings.Split(v, ",")
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: want memory, host:port, redis://[user:pass@]host:port[/db] or rediss://...", a)
		}
		if err := checkListenAddr(a); err != nil {
			return err
		}
	}
	if len(addrs) > 1 {
		st.Type = server.StoreRedisCluster
	} else if st.Type != server.StoreRedisCluster {
		st.Type = server.StoreRedis
	}
	st.Addrs = addrs
	return nil
}

// checkListenAddr checks a host:port address.
func checkListenAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q: want host:port, such as 127.0.0.1:8080 or 0.0.0.0:8080", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", a)
	}
	return nil
}

// redactURL hides a password in a URL-like value before it is shown.
func redactURL(v string) string {
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok {
		return v
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
		}
	}
	return v
}
