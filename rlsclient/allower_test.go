package rlsclient_test

import (
	"github.com/floodgate-dev/floodgate/grpclimit"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/rlsclient"
)

// A Client stands where a Limiter stands: behind the HTTP middleware and
// the gRPC interceptors.
var (
	_ httplimit.Allower = (*rlsclient.Client)(nil)
	_ grpclimit.Allower = (*rlsclient.Client)(nil)
)
