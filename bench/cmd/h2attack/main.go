// Command h2attack re-runs the attacks on wsgate's HTTP/2 paths (a
// client's connection to the TLS listener with gateway.tls.h2, a node's
// connection on an h2 pool) and measures what each costs the clients who
// are not attacking. For every attack it starts a fresh wsgate (default
// config but for short health probes) with its nodes on 127.0.0.1, runs
// -victims WebSocket echo clients, each on a TLS connection of its own
// whose ALPN chose h2 (for 15, plain GETs over such connections), for
// -baseline, then goes on with them during -duration of the attack, from
// another address (-attacker, 127.0.0.2), and reports:
//
//   - the victims' p50 and p99 round trips before and during the attack,
//     the p99 ratio, and the share of their operations that succeeded
//     during it (an echo not back within 5 s, a GET not answered 200, a
//     lost connection each count as failed);
//   - the gateway's RSS just before and its peak during the attack
//     (VmHWM, reset through /proc/PID/clear_refs, and VmRSS sampled every
//     25 ms), its CPU time over the attack in percent of one core, and the
//     lines it logged; and the attacking process's own CPU (its clients
//     and flooding nodes), since on a small machine it takes cores the
//     gateway would have;
//   - what the attacker got: cut or not, the GOAWAY code, answers, bytes
//     sent; for rapid reset the node handshakes against the streams reset.
//
// The victims and their echo node (the echo pool's one node) run in a
// process of their own (this command with -victim-side, see
// victimside.go), so that the attacker's goroutines never delay their
// round trips.
//
// The attacks (each bounded by -duration):
//
//	14  a node of an h2 pool floods PINGs and stops reading, triggered by
//	    a client of that pool; after each cut the client comes back
//	15  6 TLS connections x 100 POST streams sending 1 byte of a 100 KB
//	    body, kept at 100 (a stream that ends is replaced); victims GET
//	    from the same node
//	16  3 connections, each with -attack-streams WebSocket streams open
//	    (to the reset pool), flood SETTINGS toggling INITIAL_WINDOW_SIZE,
//	    reading the answers, at the 6.4 MB/s together
//	    (-flood-rate); each connection cut is replaced by a new one, its
//	    streams opened again, until the attack's end (-reconnect)
//	17  the same with WINDOW_UPDATE(0, 1), at the 9.7 MB/s
//	18  a node floods SETTINGS (INITIAL_WINDOW_SIZE toggles) and stops
//	    reading, with -node-streams of its clients' streams on that
//	    connection
//	19  3 connections open WebSocket streams and reset them at once
//	    (HEADERS then RST_STREAM(CANCEL)), to a pool of their own whose node
//	    counts the WebSocket handshakes it gets, as fast as they can
//	    (-reset-rate), each connection cut replaced (-reconnect)
//
// Each attack is run -reps times (a new gateway each time); the table has
// the medians, and each run is listed under it. The gateway and its nodes
// listen on 127.0.0.1 only; the gateway is stopped by its PID after each
// run.
//
// Usage:
//
//	go build -o /tmp/wsgate ./cmd/wsgate
//	go run ./bench/cmd/h2attack [-gateway /tmp/wsgate] [-attacks 14,15,16,17,18,19]
//	     [-reps 3] [-baseline 3s] [-duration 4s] [-victims 20] [-interval 20ms]
//	     [-attack-streams 100] [-node-streams 100] [-flood-rate 0] [-reset-rate 0] [-reconnect=true]
//	     [-attacker 127.0.0.2] [-dir DIR]
//
// Without -gateway it builds ./cmd/wsgate from the working directory (the
// module's root) into -dir.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if o.victimSide {
		err = runVictimSide(ctx, o, os.Stdin, os.Stdout)
	} else {
		err = run(ctx, o, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2attack:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	gateway       string
	dir           string
	attacks       []string
	reps          int
	baseline      time.Duration
	duration      time.Duration
	victims       int
	interval      time.Duration
	attackStreams int
	nodeStreams   int
	floodRate     float64
	resetRate     int
	attacker      net.IP
	victimSide    bool
	reconnect     bool
}

// allAttacks are the attacks in the order they run.
var allAttacks = []string{"14", "15", "16", "17", "18", "19"}

// parseFlags reads the command line; its errors are also written to
// stderr with the usage.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("h2attack", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.gateway, "gateway", "", "the wsgate binary (default: built from ./cmd/wsgate into -dir)")
	fs.StringVar(&o.dir, "dir", "", "directory for the configs and logs (default: a new one in $TMPDIR)")
	attacks := fs.String("attacks", strings.Join(allAttacks, ","), "the attacks to run, by their number in the list above, comma-separated, or all")
	fs.IntVar(&o.reps, "reps", 3, "runs of each attack (a new gateway each); the table has their medians")
	fs.DurationVar(&o.baseline, "baseline", 3*time.Second, "how long the victims run before the attack")
	fs.DurationVar(&o.duration, "duration", 4*time.Second, "how long each attack lasts")
	fs.IntVar(&o.victims, "victims", 20, "victims, each on a TLS connection of its own (h2)")
	fs.DurationVar(&o.interval, "interval", 20*time.Millisecond, "a victim's pause between two round trips")
	fs.IntVar(&o.attackStreams, "attack-streams", 100, "16, 17: WebSocket streams open on each attacking connection (at most h2_max_streams, 100)")
	fs.IntVar(&o.nodeStreams, "node-streams", 100, "18: the attacker's WebSocket streams on the flooding node's connection")
	fs.Float64Var(&o.floodRate, "flood-rate", 0, "16, 17: MB a second the 3 connections send together (0: the issue's, 6.4 for 16 and 9.7 for 17; -1: as fast as they can)")
	fs.IntVar(&o.resetRate, "reset-rate", 0, "19: streams a second the 3 connections open and reset together (0: as fast as they can)")
	fs.BoolVar(&o.reconnect, "reconnect", true, "16, 17, 19: an attacking connection cut is replaced by a new one (with its streams), until the attack's end; false: the attack stops at the cuts, and the victims are still measured to its end")
	fs.BoolVar(&o.victimSide, "victim-side", false, "run as the victims' process (started by this command itself)")
	attacker := fs.String("attacker", "127.0.0.2", "the attacker's source address (loopback)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	bad := func(format string, a ...any) (options, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintln(stderr, "h2attack:", err)
		fs.Usage()
		return o, err
	}
	if fs.NArg() > 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.attacks, err = parseAttacks(*attacks); err != nil {
		return bad("-attacks: %v", err)
	}
	switch {
	case o.reps < 1 || o.reps > 20:
		return bad("-reps %d: want 1-20", o.reps)
	case o.baseline < 500*time.Millisecond || o.baseline > time.Minute:
		return bad("-baseline %v: want 500ms-1m", o.baseline)
	case o.duration < 500*time.Millisecond || o.duration > 2*time.Minute:
		return bad("-duration %v: want 500ms-2m", o.duration)
	case o.victims < 1 || o.victims > 500:
		return bad("-victims %d: want 1-500", o.victims)
	case o.interval < 0 || o.interval > time.Second:
		return bad("-interval %v: want 0-1s", o.interval)
	case o.attackStreams < 1 || o.attackStreams > 10000:
		return bad("-attack-streams %d: want 1-10000", o.attackStreams)
	case o.nodeStreams < 1 || o.nodeStreams > 1000:
		return bad("-node-streams %d: want 1-1000", o.nodeStreams)
	case o.floodRate != -1 && (o.floodRate < 0 || o.floodRate > 1000):
		return bad("-flood-rate %v: want -1, 0 or a rate up to 1000 MB/s", o.floodRate)
	case o.resetRate < 0 || o.resetRate > 10_000_000:
		return bad("-reset-rate %d: want 0-10000000", o.resetRate)
	}
	o.attacker = net.ParseIP(*attacker)
	if o.attacker == nil || !o.attacker.IsLoopback() || o.attacker.To4() == nil {
		return bad("-attacker %q: want an IPv4 loopback address", *attacker)
	}
	return o, nil
}

// parseAttacks reads -attacks: numbers from allAttacks, comma-separated,
// each once, or "all"; the result is in allAttacks' order.
func parseAttacks(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(allAttacks), nil
	}
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if !slices.Contains(allAttacks, a) {
			return nil, fmt.Errorf("%q is not one of %s", a, strings.Join(allAttacks, ","))
		}
		if seen[a] {
			return nil, fmt.Errorf("%s named twice", a)
		}
		seen[a] = true
	}
	var out []string
	for _, a := range allAttacks {
		if seen[a] {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no attack named")
	}
	return out, nil
}
