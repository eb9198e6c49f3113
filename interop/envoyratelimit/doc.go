// Package envoyratelimit holds the differential tests between Floodgate and
// envoyproxy/ratelimit, the reference implementation of Envoy's Rate Limit
// Service: both servers run in this test process against one real
// redis-server, are fed the reference's own configuration files, and every
// answer is compared field by field.
package envoyratelimit
