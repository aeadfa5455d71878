// Package loadgen is the engine of wsload, the WebSocket load generator and
// checker: a memory-lean client (raw TCP or TLS, a hand-written handshake,
// or a stream of one of a few HTTP/2 connections; frames through
// internal/wsframe, reads through the runtime poller without a buffer
// while idle), the scenarios (idle, churn, fanout, reconnect-storm,
// kill, drain), the latency histograms, the report that several processes
// merge, and the thresholds that turn a report into an exit code.
//
// Everything a scenario measures ends up in one [Report], whose JSON keys are
// the stable interface documented in docs/wsload.md.
package loadgen
