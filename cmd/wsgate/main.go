// Command wsgate is the WebSocket edge gateway.
//
//	wsgate [-config FILE]            run the gateway (default conf/wsgate.toml)
//	                                 SIGHUP or a file change: reload the config
//	                                 SIGUSR2: restart onto a new process, no connection refused
//	wsgate -check [-config FILE]     validate the config, load the TLS files, start
//	                                 and configure each auth plugin, and exit (1 on error)
//	wsgate -version                  print the version, VCS revision and Go version
//	wsgate -healthcheck URL          GET URL: exit 0 on a 2xx answer, else 1 (for
//	                                 container health checks; the image has no shell)
//
// The demo, the gateway and two relay replicas in one process, is a command
// of its own, so that this binary does not link the reference relay:
//
//	go run ./cmd/wsgate-demo [-listen ADDR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway"
	"github.com/wsgate/wsgate/internal/buildinfo"
	"github.com/wsgate/wsgate/internal/handoff"
	"github.com/wsgate/wsgate/internal/rlimit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its outputs and exit code explicit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo" {
		return demoMoved(stderr)
	}
	fs := flag.NewFlagSet("wsgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "conf/wsgate.toml", "config file")
	check := fs.Bool("check", false, "validate the config, load the TLS files, start each auth plugin with its config, print the problems with file:line, and exit")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	var o serveOptions
	fs.StringVar(&o.pidfile, "pidfile", "", "write the process id here once serving (a restarted process rewrites it)")
	fs.BoolVar(&o.watch, "watch", true, "reload the config when its file changes (SIGHUP and POST /api/reload always do)")
	version := fs.Bool("version", false, "print the version, VCS revision and Go version, and exit")
	health := fs.String("healthcheck", "", "GET this URL (such as http://127.0.0.1:9090/readyz), exit 0 on a 2xx answer and 1 otherwise, printing why; for container health checks")
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Read())
		return 0
	}
	if fs.NArg() > 0 {
		if fs.Arg(0) == "demo" {
			return demoMoved(stderr)
		}
		fmt.Fprintf(stderr, "wsgate: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *health != "" {
		return healthcheck(*health, stdout, stderr)
	}
	level, err := parseLevel(*logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "wsgate:", err)
		return 2
	}
	cfg, err := conf.Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The log's format is the config's, read once: a reload cannot
	// change the handler every component already holds.
	log := newLogger(stderr, level, cfg.Log.Format)
	if *check {
		// A plugin's config table is the plugin's to judge: start each
		// one and let it, as a start or reload would.
		// The ACME directory is fetched as a start would, so a CA that
		// cannot be reached or trusted fails the check, not every order.
		if err := errors.Join(gateway.CheckTLS(cfg), gateway.CheckACME(context.Background(), cfg), gateway.CheckPlugins(cfg, log)); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", *configPath)
		return 0
	}
	if err := serve(cfg, o, log); err != nil {
		log.Error("wsgate stopped", "err", err)
		return 1
	}
	return 0
}

// demoMoved answers `wsgate demo`, which the demo's own command replaced:
// it says where the demo is and exits 2.
func demoMoved(stderr io.Writer) int {
	fmt.Fprintln(stderr, "wsgate: the demo is its own command: "+demoCommand)
	return 2
}

// demoCommand runs the demo from the source tree.
const demoCommand = "go run ./cmd/wsgate-demo"

// serveOptions are the flags that shape a gateway process's life.
type serveOptions struct {
	pidfile string // written once the gateway accepts
	watch   bool   // reload when the config file changes
}

// serve runs the gateway until SIGTERM or SIGINT, then drains it. SIGHUP
// (and a change of the config file, with watch) reloads the config; SIGUSR2
// starts a new process of the same binary on the same listening sockets
// and, once it is ready, drains this one.
func serve(cfg *conf.Config, o serveOptions, log *slog.Logger) error {
	rlimit.RaiseAndLog(log)
	srv, err := gateway.New(cfg, log)
	if err != nil {
		return err
	}
	inherited, err := handoff.FromEnv()
	if err != nil {
		return err
	}
	if inherited != nil {
		srv.SetListen(inherited.Listen)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	if err := srv.Start(); err != nil {
		return err
	}
	if err := inherited.Ready(); err != nil {
		log.Warn("telling the previous process we are ready", "err", err)
	}
	if o.pidfile != "" {
		if err := os.WriteFile(o.pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			log.Warn("pidfile", "err", err)
		}
		defer removeOwnPidfile(o.pidfile)
	}
	_ = handoff.NotifySystemd(fmt.Sprintf("READY=1\nMAINPID=%d", os.Getpid()))
	attrs := []any{"config", cfg.File, "addr", srv.Addr().String(), "inherited", inherited != nil}
	if a := srv.AdminAddr(); a != nil {
		attrs = append(attrs, "admin", a.String())
	}
	log.Info("wsgate listening", attrs...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if o.watch {
		if err := conf.Watch(ctx, cfg.File, 0, func() { _ = srv.ReloadBy(gateway.ReloadFile) }); err != nil {
			log.Warn("config file not watched", "err", err)
		}
	}
	var failed error // a listener stopped accepting: drain, then exit 1
wait:
	for {
		var sig os.Signal
		select {
		case failed = <-srv.Failed():
			log.Error("draining: the gateway no longer accepts", "err", failed)
			break wait
		case sig = <-sigs:
		}
		switch sig {
		case syscall.SIGHUP:
			_ = srv.ReloadBy(gateway.ReloadSignal) // logged, counted and shown by the server
			continue
		case syscall.SIGUSR2:
			if !upgrade(srv, log) {
				continue
			}
		}
		log.Info("draining", "signal", sig.String())
		break
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	if failed != nil {
		return failed
	}
	log.Info("wsgate stopped")
	return nil
}

// upgrade starts the next process of this binary on the same sockets and
// reports whether it became ready; if not, this process keeps serving.
func upgrade(srv *gateway.Server, log *slog.Logger) bool {
	exe, err := os.Executable()
	if err != nil {
		log.Error("upgrade: cannot find this executable", "err", err)
		return false
	}
	log.Info("upgrade: starting the new process", "exe", exe)
	pid, err := handoff.Spawn(exe, os.Args[1:], srv.Listeners(), os.Stdout, os.Stderr, 30*time.Second)
	if err != nil {
		log.Error("upgrade failed; this process keeps serving", "err", err)
		return false
	}
	log.Info("upgrade: new process ready, draining this one", "new_pid", pid)
	return true
}

// removeOwnPidfile removes the pidfile unless a newer process rewrote it.
func removeOwnPidfile(path string) {
	b, err := os.ReadFile(path)
	if err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		_ = os.Remove(path)
	}
}

// parseLevel reads the -log-level flag.
func parseLevel(level string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return 0, errors.New("bad -log-level " + level + ": want debug, info, warn or error")
	}
	return l, nil
}

// newLogger builds the process's log on w: format "json" or "text" (any
// other value), every line with the process id, so the two processes of a
// SIGUSR2 restart, which write to the same stream, can be told apart.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With("pid", os.Getpid())
}
