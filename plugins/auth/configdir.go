package auth

import (
	"context"
	"path/filepath"

	"google.golang.org/grpc/metadata"
)

// configDirKey carries the config file's directory in Configure's
// context.
type configDirKey struct{}

// configDirMeta is the gRPC metadata key that carries the directory from
// the gateway to the plugin process ("-bin": any bytes, a path need not
// be ASCII). A plugin built before it existed ignores it.
const configDirMeta = "wsgate-config-dir-bin"

// WithConfigDir returns ctx carrying dir, the directory of the gateway's
// config file, for a Configure call: the gateway's plugin host sets it,
// and GRPCClient passes it on to the plugin process.
func WithConfigDir(ctx context.Context, dir string) context.Context {
	return context.WithValue(ctx, configDirKey{}, dir)
}

// ConfigDir is the absolute directory of the gateway's config file, as
// Configure's ctx carries it; "" when the gateway did not say (one older
// than this function, or a test calling Configure directly). A plugin
// takes a relative path of its config table from there, as the gateway
// does for its own paths (see ConfigPath).
func ConfigDir(ctx context.Context) string {
	dir, _ := ctx.Value(configDirKey{}).(string)
	return dir
}

// ConfigPath is path, a file named in the plugin's config table, as the
// plugin should open it: a relative path joined to ConfigDir(ctx), so that
// it means what it means to the reader of the config file whatever the
// gateway's working directory; an absolute path, or any path when
// ConfigDir(ctx) is "", unchanged.
func ConfigPath(ctx context.Context, path string) string {
	dir := ConfigDir(ctx)
	if path == "" || dir == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// outgoingConfigDir adds ctx's config directory to the metadata of the
// Configure call it makes.
func outgoingConfigDir(ctx context.Context) context.Context {
	if dir := ConfigDir(ctx); dir != "" {
		return metadata.AppendToOutgoingContext(ctx, configDirMeta, dir)
	}
	return ctx
}

// incomingConfigDir is ctx carrying the config directory the gateway
// sent with a Configure call, if it sent one.
func incomingConfigDir(ctx context.Context) context.Context {
	if v := metadata.ValueFromIncomingContext(ctx, configDirMeta); len(v) > 0 && v[0] != "" {
		return WithConfigDir(ctx, v[0])
	}
	return ctx
}
