package rlsclient_test

import (
	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

// A Client stands where a Limiter stands: behind the HTTP middleware and
// the gRPC interceptors.
var (
	_ floodgate.Allower = (*rlsclient.Client)(nil)
	_ floodgate.Allower = (*floodgate.Limiter)(nil)
)
