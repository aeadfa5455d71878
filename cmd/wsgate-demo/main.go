// Command wsgate-demo runs the gateway in front of in-process relay
// replicas on an in-process bus: no config file, no Redis.
//
//	go run ./cmd/wsgate-demo [-listen ADDR] [-admin ADDR] [-replicas N]
//
// It is a command of its own, not a mode of wsgate, so that the production
// wsgate binary does not link the reference relay (relay-backend/...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway"
	"github.com/wsgate/wsgate/internal/rlimit"
	"github.com/wsgate/wsgate/relay-backend/bus"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// demoOptions are the flags of wsgate-demo.
type demoOptions struct {
	listen, admin string
	replicas      int
}

// demoFlags defines the demo's flags on a new flag set that writes to w.
func demoFlags(o *demoOptions, w io.Writer) (fs *flag.FlagSet, logLevel *string) {
	fs = flag.NewFlagSet("wsgate-demo", flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "gateway listen address")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:9090", "admin listen address")
	fs.IntVar(&o.replicas, "replicas", 2, "relay replicas to run in process (1-16)")
	logLevel = fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprint(w, "Usage: go run ./cmd/wsgate-demo [flags]\n\n"+demoAbout+"\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, logLevel
}

// demoAbout says what the demo is, for the usage texts.
const demoAbout = `The gateway in front of in-process relay replicas on an in-process bus:
no config file, no Redis. Open the printed URL in two browser tabs.
`

// run parses the demo's flags and runs it until SIGINT or SIGTERM; it is
// main with its outputs and exit code explicit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	var o demoOptions
	fs, logLevel := demoFlags(&o, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if o.replicas < 1 || o.replicas > 16 {
		fmt.Fprintln(stderr, "wsgate-demo: -replicas must be 1 to 16")
		return 2
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "wsgate-demo:", err)
		return 2
	}
	log := newLogger(stderr, level)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, o, stdout, log); err != nil {
		fmt.Fprintln(stderr, "wsgate-demo:", err)
		return 1
	}
	return 0
}

// demo runs the gateway in front of o.replicas relay replicas that share an
// in-process bus, prints where to look, and drains everything when ctx ends.
func demo(ctx context.Context, o demoOptions, stdout io.Writer, log *slog.Logger) error {
	rlimit.RaiseAndLog(log)
	mem := bus.NewMemory()
	defer mem.Close()
	var relays []*relay.Relay
	var addrs []string
	defer func() {
		for _, r := range relays {
			_ = r.Close(context.Background())
		}
	}()
	for i := range o.replicas {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("relay listener: %w", err)
		}
		id := fmt.Sprintf("relay-%d", i+1)
		r := relay.New(relay.Options{ID: id, Bus: mem.Endpoint(), DrainWindow: time.Second, Logger: log.With("replica", id)})
		relays = append(relays, r)
		addrs = append(addrs, ln.Addr().String())
		go func() { _ = r.Serve(ln) }()
	}
	cfg, err := conf.Parse("demo.toml", []byte(demoConfig(o, addrs)))
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	srv, err := gateway.New(cfg, log)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `wsgate demo is running.

  open in two browser tabs:  http://%[1]s/
  WebSocket rooms:           ws://%[1]s/room/<name>
  gateway readiness:         http://%[2]s/readyz
  relay replicas:            %[3]s

Press Ctrl-C to drain (every client gets close 1001) and stop.
`, srv.Addr(), srv.AdminAddr(), strings.Join(addrs, ", "))
	<-ctx.Done()
	log.Info("draining demo", "tunnels", srv.Tunnels())
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range relays {
		if err := r.Drain(drainCtx); err != nil {
			log.Warn("relay drain", "err", err)
		}
	}
	return nil
}

// demoConfig is the gateway config of the demo: one pool of the in-process
// replicas, every path routed to it.
func demoConfig(o demoOptions, addrs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[gateway]\nlisten = %q\ndrain_window = \"2s\"\ndrain_timeout = \"10s\"\n\n", o.listen)
	fmt.Fprintf(&b, "[admin]\nlisten = %q\n\n", o.admin)
	b.WriteString("[[pools]]\nname = \"relay\"\nbalance = \"least_conn\"\n")
	for _, a := range addrs {
		fmt.Fprintf(&b, "  [[pools.nodes]]\n  addr = %q\n", a)
	}
	b.WriteString("\n[[routes]]\npath_prefix = \"/\"\npool = \"relay\"\n")
	return b.String()
}

// parseLevel reads the -log-level flag.
func parseLevel(level string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return 0, errors.New("bad -log-level " + level + ": want debug, info, warn or error")
	}
	return l, nil
}

// newLogger builds the demo's text log on w, every line with the process
// id, as wsgate's.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("pid", os.Getpid())
}
