// Package auth is the contract between wsgate and its authentication
// plugins, and the SDK plugin authors import.
//
// A plugin is a separate executable, built in its own repository, that
// implements Authenticator and calls Serve from its main:
//
//	func main() { auth.Serve(&myAuth{}) }
//
// The gateway starts it as a subprocess (hashicorp/go-plugin over gRPC),
// calls Configure once with the plugin's [plugins.config] table, then
// Authenticate for every WebSocket handshake on a route whose auth chain
// names it. The wire format is proto/auth.proto; the go-plugin handshake is
// Handshake (protocol version 1).
//
// Errors cross the process boundary as gRPC status codes and come back as
// errors wrapping ErrInvalidConfig, ErrPlugin or ErrTransport, so the
// gateway can tell a bad config from a plugin that could not decide from a
// plugin that is gone. Whatever the error, the gateway fails closed.
package auth
