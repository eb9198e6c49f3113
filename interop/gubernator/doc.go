// Package gubernator holds the tests that hold `floodgate serve`'s
// gubernator API to gubernator itself (gubernator-io/gubernator, the
// version go.mod pins, v2.13.0, beside Floodgate with gubernator.version
// v2.13), run in this test process from its own module:
//
//   - TestDifferential: a gubernator daemon and a Floodgate server (on the
//     memory store, on one redis-server and on a Redis Cluster, where
//     Redis's script decides in the centralized arrangement), both
//     on loopback and on one frozen clock that the test advances, get the
//     same generated request sequences through gubernator's own Go client
//     (DialV1Server): many names and keys, hits (none, negative, over),
//     limits, durations and bursts that change per key, both algorithms
//     and switches between them, every behaviour, calendar periods,
//     created_at given or not, max_wait, time advancing across expiries.
//     Every answer's status, limit, remaining, reset_time, retry_after and
//     error must be equal; the one documented exception is checked for
//     what it is.
//   - TestSequences: fixed sequences a random one seldom meets (a leak a
//     hair under whole tokens, bookings into debt, a token bucket refused
//     then raised), compared the same way.
//   - TestHTTPGateway: the same over POST /v1/GetRateLimits and GET
//     /v1/HealthCheck, with the gateway's status codes for bad input.
//
// gubernator's Go types and Floodgate's (generated from a proto file of its
// own for the same proto package) both register in protobuf's global
// registry, which stops the process at the first name registered twice
// unless told to warn: run with GOLANG_PROTOBUF_REGISTRATION_CONFLICT=warn,
// as scripts/test's interop step does.
//
// With FLOODGATE_GUBERNATOR_REFERENCE naming a gubernator-reference binary
// (testdata/reference, built with a newer gubernator by
// scripts/compare-gubernator-current), the tests run it as the reference
// instead, as a process of its own whose frozen clock they move with
// theirs, and Floodgate answers as gubernator.version v2.21
// (FLOODGATE_GUBERNATOR_VERSION to change it). v2.21.0's fields, which the
// pinned Go types lack, travel as unknown fields.
//
// GLOBAL is left out of the sequences: on a single gubernator node it
// re-reads the key about 100 ms of real time later with the request's
// parameters, which changes the state when later requests changed them;
// Floodgate answers GLOBAL from its arrangement (docs/migration-gubernator.md).
package gubernator
