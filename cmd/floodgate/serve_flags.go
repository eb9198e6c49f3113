package main

import (
	"fmt"
	"net"
	"strconv"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
)

// serveOverrides are the listener flags that override the configuration
// file; empty ones leave it alone. (--store is the config's Store.SetURL.)
type serveOverrides struct {
	http, grpc, gateway string
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
