// Command wsload generates WebSocket load against a URL (the wsgate gateway,
// or a relay directly for a baseline) and checks the results.
//
// Usage:
//
//	wsload <scenario> -url ws[s]://HOST:PORT/room/r%d [flags]
//
// wss:// URLs take -ca FILE, -insecure and -tls 1.2|1.3; -h2 opens the
// WebSockets as streams of a few HTTP/2 connections (-h2-streams N
// each): ALPN h2 over wss://, prior knowledge over ws://.
//
// Scenarios: idle, churn, fanout, reconnect-storm, kill, drain. Every
// scenario prints a summary table (stdout, or stderr with -json); -json
// prints one JSON object on stdout; -threshold 'metric<value' (repeatable)
// makes the exit code 1 when violated, as does a run that misses its
// scenario's target (too few connected, clients not back) unless a
// threshold on those counts says otherwise; -H 'Name: value' (repeatable)
// adds a header to every handshake. See docs/wsload.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/wsgate/wsgate/bench/loadgen"
	"github.com/wsgate/wsgate/internal/rlimit"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // a threshold was violated or the run failed
	exitUsage  = 2 // bad flags or configuration
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the scenario (or its child processes) and reports;
// it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "wsload: %v\n", err)
		return exitUsage
	}
	if soft, _, err := rlimit.RaiseNoFile(); err != nil {
		fmt.Fprintf(stderr, "wsload: %v (open files limited to %d)\n", err, soft)
	}
	rep, err := execute(ctx, o, args, stderr)
	if rep == nil {
		fmt.Fprintf(stderr, "wsload: %v\n", err)
		return exitFailed
	}
	if o.child >= 0 {
		// A child hands its raw report, histograms included, to the parent.
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "wsload: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	rep.ApplyThresholds(append(slices.Clone(o.thresholds), loadgen.TargetChecks(o.cfg.Scenario, o.thresholds)...))
	rep.StripHists()
	table := stdout
	if o.json {
		table = stderr
	}
	if werr := rep.WriteTable(table); werr != nil {
		fmt.Fprintf(stderr, "wsload: %v\n", werr)
	}
	if o.json {
		if werr := writeJSON(stdout, rep); werr != nil {
			fmt.Fprintf(stderr, "wsload: %v\n", werr)
			return exitFailed
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "wsload: %v\n", err)
		return exitFailed
	}
	if !rep.Passed {
		return exitFailed
	}
	return exitOK
}
