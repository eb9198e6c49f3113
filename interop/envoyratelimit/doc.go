// Package envoyratelimit holds the tests that hold Floodgate to
// envoyproxy/ratelimit, the reference implementation of Envoy's Rate Limit
// Service, run in this test process from its own module (the version
// go.mod pins) against real redis-server processes:
//
//   - TestReferenceConfigsLoad: every YAML rule file of the reference's
//     (examples/ratelimit/config, test/config, the integration runtime
//     directory, the README's examples, read from the module cache) loads
//     in Floodgate when it loads in the reference.
//   - TestOwnModeAgainstReference, TestCompatModeAgainstReference and
//     TestCompatModeSettingsAgainstReference: both servers started on the
//     same files (and, for `serve --compat envoy-ratelimit`, the same
//     environment variables) answer requests generated from each file's
//     descriptors; every field of every gRPC and POST /json answer is
//     compared, and a difference fails unless the mode's list of known
//     differences names it with its reason.
//   - TestIntegrationPort*: the reference's integration_test.go ported to a
//     client of any RLS: 58 assertions, all passing on the reference.
//   - TestMixedFleet: the reference and the compatibility mode on one Redis,
//     alternating requests for one key, enforce one limit.
//
// Run with INTEROP_FINDINGS=FILE to get every differing field as a
// Markdown table.
package envoyratelimit
