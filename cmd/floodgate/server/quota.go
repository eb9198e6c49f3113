package server

import (
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/quotalease"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/rlqs"
	"github.com/floodgate-dev/floodgate/rlsclient/quotapb"
)

// registerQuota registers the services that hand out parts of a key's
// allowance on the gRPC listener: quota leases (rlsclient's) and Envoy's
// Rate Limit Quota Service, both deciding with the rule engine's Hold.
func (s *Server) registerQuota() {
	quotalease.New(s.engine, s.log).Register(s.grpc)
	rlqs.New(s.engine, s.log).Register(s.grpc)
}

// quotaHealth sets the quota services' health to st.
func (s *Server) quotaHealth(st healthpb.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus(quotapb.QuotaLeases_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, st)
}
