// Package envoyratelimit holds the tests that hold Floodgate to
// envoyproxy/ratelimit, the reference implementation of Envoy's Rate Limit
// Service, run in this test process from its own module (the version
// go.mod pins, or sources a replace points to:
// scripts/compare-envoy-ratelimit-current) against real redis-server
// processes:
//
//   - TestReferenceConfigsLoad and FuzzConfigLoadAgainstReference: every
//     YAML rule file of the reference's (examples/ratelimit/config,
//     test/config, the integration runtime directory, the README's examples,
//     read from the module) loads in Floodgate when it loads in the
//     reference, and any text loads in compatibility mode exactly when it
//     loads in the reference.
//   - TestOwnModeAgainstReference, TestCompatModeAgainstReference and
//     TestCompatModeSettingsAgainstReference: both servers started on the
//     same files (and, for `serve --compat envoy-ratelimit`, the same
//     environment variables) answer requests generated from each file's
//     descriptors; every field of every gRPC and POST /json answer, and
//     /rlconfig, is compared, and a difference fails unless the mode's list
//     of known differences names it with its reason.
//   - TestIntegrationPort*: the reference's integration_test.go ported to a
//     client of any RLS: 58 assertions, all passing on the reference.
//     TestIntegrationScripts*: its integration-test/scripts (curl through
//     Envoy) ported to the calls Envoy makes: 46 assertions.
//   - TestMixedFleet*: the reference and the compatibility mode on one
//     Redis, alternating requests for one key, enforce one limit.
//   - TestStatsdAgainstReference, TestTracingAgainstReference: the same
//     statsd counters, the same OTLP spans.
//   - TestCompatModeAgainstRecordedReference and
//     TestCompatModeLoadsAsRecordedReference replay what a newer reference
//     answered (testdata/envoyproxy-ratelimit, recorded by
//     scripts/compare-envoy-ratelimit-current RECORD=1) against compatibility
//     mode; TestReferenceVersionIsNewest fails when the module proxy serves a
//     version newer than go.mod's.
//
// Run with INTEROP_FINDINGS=FILE to get every differing field as a
// Markdown table.
package envoyratelimit
