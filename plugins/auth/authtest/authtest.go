// Package authtest runs a built auth plugin executable the way the gateway
// does, for the plugin's own tests: started over go-plugin, configured, and
// stopped when the test ends.
package authtest

import (
	"context"
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/wsgate/wsgate/plugins/auth"
)

// Start runs the plugin executable at path, configures it with config and
// returns the client. Its stderr goes to stderr (nil: discarded). The
// process is killed when the test ends.
func Start(tb testing.TB, path string, config map[string]any, stderr io.Writer) *auth.GRPCClient {
	tb.Helper()
	c, err := StartErr(tb, path, config, stderr)
	if err != nil {
		tb.Fatalf("start plugin %s: %v", path, err)
	}
	return c
}

// StartErr is Start that returns the start or Configure error instead of
// failing the test (to test a rejected config).
func StartErr(tb testing.TB, path string, config map[string]any, stderr io.Writer) (*auth.GRPCClient, error) {
	tb.Helper()
	if stderr == nil {
		stderr = io.Discard
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  auth.Handshake,
		Plugins:          plugin.PluginSet{auth.PluginName: &auth.Plugin{}},
		Cmd:              exec.Command(path),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Stderr:           stderr,
		SyncStderr:       stderr,
		Logger:           hclog.New(&hclog.LoggerOptions{Level: hclog.Off, Output: io.Discard}),
		StartTimeout:     30 * time.Second,
	})
	tb.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		return nil, err
	}
	raw, err := rpc.Dispense(auth.PluginName)
	if err != nil {
		return nil, err
	}
	a := raw.(*auth.GRPCClient)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Configure(ctx, config); err != nil {
		return nil, err
	}
	return a, nil
}
