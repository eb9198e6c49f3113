package rlsclient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/rlsclient"
)

// A Go program asks a central Floodgate server, as it would ask a Limiter.
// Here `floodgate serve` listens for RLS on 127.0.0.1:8081 with a rule of
// domain "api" that gives each key 2 requests a minute:
//
//	domain: api
//	rules:
//	  - name: per-client
//	    match: {key: "*"}
//	    count_by: [key]
//	    limit: 2
//	    window: 1m
//
// Three calls print "allowed true, 1 of 2 remaining", "allowed true, 0 of 2
// remaining" and "allowed false, 0 of 2 remaining". (The example is not run
// by go test, which has no server; cmd/floodgate/server's tests run the
// client against one.)
func Example() {
	c, err := rlsclient.New("127.0.0.1:8081", rlsclient.Options{Domain: "api", Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for range 3 {
		d, err := c.Allow(context.Background(), "acme")
		if err != nil {
			fmt.Println("no answer:", err)
			return
		}
		fmt.Printf("allowed %v, %d of %d remaining\n", d.Allowed, d.Remaining, d.Limit)
	}
}
