package auth

import (
	"context"
	"net"
	"testing"

	authpb "github.com/wsgate/wsgate/plugins/auth/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// dirPlugin records the config directory its Configure was given.
type dirPlugin struct{ dir, path string }

func (p *dirPlugin) Configure(ctx context.Context, _ map[string]any) error {
	p.dir, p.path = ConfigDir(ctx), ConfigPath(ctx, "keys.txt")
	return nil
}

func (p *dirPlugin) Authenticate(context.Context, *Request) (*Decision, error) {
	return Allow(nil), nil
}

// TestConfigDirCrossesGRPC pins how a plugin learns the directory of the
// gateway's config file, which its relative paths are taken from: the
// gateway's Configure context carries it over a real gRPC connection
// (any bytes: a path need not be ASCII), and a plugin whose gateway says
// nothing sees "" and keeps its paths as written.
func TestConfigDirCrossesGRPC(t *testing.T) {
	p := &dirPlugin{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	authpb.RegisterAuthenticatorServer(srv, &grpcServer{impl: p})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := NewGRPCClient(conn, nil)
	for _, dir := range []string{"/etc/wsgate", "/srv/café config", ""} {
		ctx := context.Background()
		if dir != "" {
			ctx = WithConfigDir(ctx, dir)
		}
		if err := c.Configure(ctx, nil); err != nil {
			t.Fatal(err)
		}
		want := "keys.txt"
		if dir != "" {
			want = dir + "/keys.txt"
		}
		if p.dir != dir || p.path != want {
			t.Errorf("sent %q: plugin saw dir %q, path %q; want %q, %q", dir, p.dir, p.path, dir, want)
		}
	}
}

// TestConfigPath pins how a plugin's path is read: relative ones from
// the config's directory, absolute ones and "" as written.
func TestConfigPath(t *testing.T) {
	ctx := WithConfigDir(context.Background(), "/etc/wsgate")
	for in, want := range map[string]string{
		"keys.txt":         "/etc/wsgate/keys.txt",
		"auth/../keys.txt": "/etc/wsgate/keys.txt",
		"/var/keys.txt":    "/var/keys.txt",
		"":                 "",
	} {
		if got := ConfigPath(ctx, in); got != want {
			t.Errorf("ConfigPath(%q) = %q, want %q", in, got, want)
		}
	}
}
