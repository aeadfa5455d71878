package auth

import (
	"context"
	"errors"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	authpb "github.com/wsgate/wsgate/plugins/auth/proto"
	"google.golang.org/grpc"
)

// PluginName is the name the plugin is served and dispensed under.
const PluginName = "auth"

// Handshake is the go-plugin handshake shared by the gateway and every auth
// plugin. ProtocolVersion is bumped on a breaking change to the wire
// contract, so a mismatched pair refuses to start instead of misbehaving;
// the magic cookie only keeps the binary from being run by hand.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "WSGATE_AUTH_PLUGIN",
	MagicCookieValue: "6f1d0c2a-wsgate-auth-v1",
}

// Plugin is the go-plugin glue for the auth contract. In a plugin, Impl is
// the Authenticator to serve; the gateway leaves it nil and dispenses a
// *GRPCClient. It only speaks gRPC.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin's Authenticator (plugin side only).
	Impl Authenticator
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("auth: Plugin.Impl is nil")
	}
	authpb.RegisterAuthenticatorServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient implements plugin.GRPCPlugin. done is cancelled by go-plugin
// when the plugin process exits.
func (p *Plugin) GRPCClient(done context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewGRPCClient(c, done.Done()), nil
}

// Serve serves impl to the gateway and returns when the gateway stops the
// plugin. It is the only call a plugin's main makes. Run by hand (without
// the gateway), it prints a notice and exits 1.
//
// Anything the plugin writes to stderr (the log package, slog's default
// logger) shows up in the gateway's log under the plugin's name.
func Serve(impl Authenticator) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: &Plugin{Impl: impl}},
		GRPCServer:      plugin.DefaultGRPCServer,
		// go-plugin's own chatter (addresses, versions) would otherwise
		// reach the gateway's log at every start; keep warnings and up.
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       "go-plugin",
			Level:      hclog.Warn,
			Output:     os.Stderr,
			JSONFormat: true,
		}),
	})
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)
