// Command wsgate is the WebSocket edge gateway.
//
//	wsgate [-config FILE]            run the gateway (default conf/wsgate.toml)
//	wsgate -check [-config FILE]     validate the config and exit (1 on error)
//	wsgate demo [-listen ADDR]       gateway + two relay replicas in one process
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
	"syscall"

	"github.com/wsgate/wsgate/conf"
	"github.com/wsgate/wsgate/gateway"
	"github.com/wsgate/wsgate/internal/rlimit"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its outputs and exit code explicit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "demo" {
		return runDemo(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("wsgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "conf/wsgate.toml", "config file")
	check := fs.Bool("check", false, "validate the config, print the first problems with file:line, and exit")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "wsgate: unexpected argument %q (did you mean 'wsgate demo'?)\n", fs.Arg(0))
		return 2
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "wsgate:", err)
		return 2
	}
	cfg, err := conf.Load(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *check {
		fmt.Fprintf(stdout, "%s: ok\n", *configPath)
		return 0
	}
	if err := serve(cfg, log); err != nil {
		log.Error("wsgate stopped", "err", err)
		return 1
	}
	return 0
}

// serve runs the gateway until SIGTERM or SIGINT, then drains it.
func serve(cfg *conf.Config, log *slog.Logger) error {
	logLimits(log)
	srv, err := gateway.New(cfg, log)
	if err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	if err := srv.Start(); err != nil {
		return err
	}
	attrs := []any{"config", cfg.File, "addr", srv.Addr().String()}
	if a := srv.AdminAddr(); a != nil {
		attrs = append(attrs, "admin", a.String())
	}
	log.Info("wsgate listening", attrs...)
	sig := <-stop
	log.Info("draining", "signal", sig.String(), "window", cfg.Gateway.DrainWindow.Duration, "timeout", cfg.Gateway.DrainTimeout.Duration)
	if err := srv.Shutdown(context.Background()); err != nil {
		return err
	}
	log.Info("wsgate stopped")
	return nil
}

// logLimits raises the open-file limit and says what limits apply: each
// tunnel holds two descriptors, so the file limit caps tunnels at about half.
func logLimits(log *slog.Logger) {
	soft, hard, err := rlimit.RaiseNoFile()
	if err != nil {
		log.Warn("open-file limit not raised", "err", err)
	}
	log.Info("open-file limit", "soft", soft, "hard", hard, "max_tunnels", (soft-64)/2)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errors.New("bad -log-level " + level + ": want debug, info, warn or error")
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
