// Package pluginhost runs the gateway's auth plugins: one process per
// [[plugins]] entry, shared by every route, started and configured once,
// optionally pinned by SHA-256, restarted with backoff when it crashes or
// hangs, swapped on reload without dropping in-flight calls. Host.Authenticate
// runs a route's chain with a bounded decision cache in front, and fails
// closed: without a decision it returns an error, never an allow.
package pluginhost
