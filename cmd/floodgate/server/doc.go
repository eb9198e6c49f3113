// Package server runs Floodgate as a service: it reads the configuration
// file, builds the counter store, the distributed arrangement and the rule
// engine, and serves the Envoy Rate Limit Service over gRPC, the JSON API,
// metrics, health checks and the status page over HTTP, and the
// rate-limiting gateway, until its context ends; then it shuts down
// gracefully.
package server
