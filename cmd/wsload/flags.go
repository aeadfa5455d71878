package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/wsgate/wsgate/bench/loadgen"
)

// options is the parsed command line.
type options struct {
	cfg        loadgen.Config
	procs      int
	json       bool
	thresholds []loadgen.Threshold
	child      int // index of this child process, -1 in the parent
}

// thresholdFlag collects repeated -threshold values, parsed at once so an
// unknown metric fails at startup.
type thresholdFlag struct{ ts *[]loadgen.Threshold }

func (f thresholdFlag) String() string { return "" }

func (f thresholdFlag) Set(s string) error {
	t, err := loadgen.ParseThreshold(s)
	if err != nil {
		return err
	}
	*f.ts = append(*f.ts, t)
	return nil
}

// headerFlag collects repeated -H values, each checked at once so a
// malformed header fails at startup.
type headerFlag struct{ hs *[]loadgen.Header }

func (f headerFlag) String() string { return "" }

func (f headerFlag) Set(s string) error {
	h, err := loadgen.ParseHeader(s)
	if err != nil {
		return err
	}
	*f.hs = append(*f.hs, h)
	return nil
}

const usage = `usage: wsload <scenario> -url ws[s]://HOST:PORT/PATH [flags]

scenarios: idle, churn, fanout, reconnect-storm, kill, drain
run "wsload <scenario> -h" for its flags; docs/wsload.md for the report keys
`

// parseArgs parses "<scenario> [flags]".
func parseArgs(args []string, out io.Writer) (options, error) {
	o := options{child: -1}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(out, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return o, flag.ErrHelp
		}
		return o, errors.New("missing scenario")
	}
	c := &o.cfg
	c.Scenario = args[0]
	if !slices.Contains(loadgen.Scenarios, c.Scenario) {
		fmt.Fprint(out, usage)
		return o, fmt.Errorf("unknown scenario %q", c.Scenario)
	}
	fs := flag.NewFlagSet("wsload "+c.Scenario, flag.ContinueOnError)
	fs.SetOutput(out)
	var source string
	var seed uint64
	var tlsOpt loadgen.TLSOptions
	var h2 bool
	var h2Streams int
	fs.StringVar(&c.URL, "url", "", "ws:// or wss:// URL to load; %d is replaced by a room number (required)")
	fs.StringVar(&tlsOpt.CAFile, "ca", "", "wss://: PEM file of the CA certificates to trust instead of the system's")
	fs.BoolVar(&tlsOpt.Insecure, "insecure", false, "wss://: do not check the server's certificate")
	fs.StringVar(&tlsOpt.Version, "tls", "", "wss://: TLS version, 1.2 or 1.3 (default: either, as negotiated)")
	fs.BoolVar(&h2, "h2", false, "open the WebSockets as streams of HTTP/2 connections (RFC 8441): ALPN h2 over wss://, prior knowledge over ws://")
	fs.IntVar(&h2Streams, "h2-streams", loadgen.DefaultH2Streams, "-h2: WebSockets per HTTP/2 connection")
	fs.StringVar(&source, "source", "", "local source addresses, round robin: list and ranges, e.g. 127.0.0.2-127.0.0.250")
	fs.IntVar(&o.procs, "procs", 1, "run as this many child processes and merge their reports")
	fs.BoolVar(&o.json, "json", false, "print one JSON report on stdout (the table goes to stderr)")
	fs.Var(thresholdFlag{&o.thresholds}, "threshold", "'metric OP value', e.g. 'p95<50ms', 'delivered>=99.9', 'dropped==0' (repeatable)")
	fs.Var(headerFlag{&c.Dialer.Header}, "H", "'Name: value' request header sent on every handshake, e.g. a route's token (repeatable)")
	fs.DurationVar(&c.Dialer.Timeout, "timeout", loadgen.DefaultTimeout, "handshake timeout (TCP connect, TLS and upgrade; over -h2 the stream's open too)")
	fs.Uint64Var(&seed, "seed", 0, "seed for jitter and ids (0: random)")
	fs.IntVar(&o.child, "child", -1, "internal: index of this child process of -procs")
	switch c.Scenario {
	case "idle":
		fs.IntVar(&c.N, "n", 1000, "connections")
		fs.Float64Var(&c.Rate, "rate", 1000, "connections opened per second")
		fs.DurationVar(&c.Hold, "hold", 10*time.Second, "how long to hold them")
		fs.DurationVar(&c.Ping, "ping", 0, "ping every connection at this interval (0: never)")
		fs.IntVar(&c.Rooms, "rooms", 100, "rooms %d cycles over")
	case "churn":
		fs.IntVar(&c.Concurrency, "c", 10, "concurrent workers, one room each")
		fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to loop")
		fs.IntVar(&c.Size, "size", loadgen.MsgHeaderLen, "probe message size in bytes")
	case "fanout", "kill", "drain":
		fs.IntVar(&c.Rooms, "rooms", 10, "rooms")
		fs.IntVar(&c.Members, "members", 2, "members per room")
		fs.Float64Var(&c.MsgRate, "rate", 1, "messages per second per member")
		fs.IntVar(&c.Size, "size", loadgen.MsgHeaderLen, "message size in bytes (at least 32)")
		fs.DurationVar(&c.Duration, "duration", 10*time.Second, "how long members send")
		fs.DurationVar(&c.Settle, "settle", 0, "wait for messages in flight after sending (default 2s; kill, drain 10s)")
		fs.Float64Var(&c.Rate, "connect-rate", 1000, "connections opened per second")
		if c.Scenario == "fanout" {
			fs.IntVar(&c.Frozen, "frozen", 0, "members that connect, then neither read nor send until the end (the last of the rooms); reported apart")
		}
		if c.Scenario != "fanout" {
			fs.DurationVar(&c.After, "after", time.Second, "when to kill or drain, after connecting")
			fs.StringVar(&c.KillCmd, "kill-cmd", "", "shell command run at -after, e.g. 'kill -9 PID'")
			fs.IntVar(&c.KillPID, "kill-pid", 0, "process to signal at -after")
			fs.StringVar(&c.Signal, "signal", "", "signal for -kill-pid (default KILL for kill, TERM for drain)")
			fs.StringVar(&c.RestartCmd, "restart-cmd", "", "shell command started at -restart-after")
			fs.DurationVar(&c.RestartAfter, "restart-after", 0, "when to run -restart-cmd, after connecting")
			fs.StringVar(&c.DrainURL, "drain-url", "", "URL to POST at -after (admin drain API)")
			fs.DurationVar(&c.Window, "window", time.Second, "reconnects start after a random delay below this")
			fs.DurationVar(&c.GiveUp, "give-up", 30*time.Second, "how long a client keeps trying to come back")
		}
	case "reconnect-storm":
		fs.IntVar(&c.N, "n", 1000, "connections")
		fs.Float64Var(&c.Rate, "rate", 1000, "connections opened per second")
		fs.IntVar(&c.Rooms, "rooms", 100, "rooms %d cycles over")
		fs.DurationVar(&c.After, "after", time.Second, "when all drop, after connecting")
		fs.DurationVar(&c.Window, "window", time.Second, "reconnects start after a random delay below this")
		fs.DurationVar(&c.GiveUp, "give-up", 30*time.Second, "how long a client keeps trying to come back")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.URL == "" {
		return o, errors.New("-url is required")
	}
	if o.procs < 1 || o.procs > 256 {
		return o, fmt.Errorf("-procs must be 1-256, got %d", o.procs)
	}
	src, err := loadgen.ParseSources(source)
	if err != nil {
		return o, err
	}
	c.Dialer.Sources = src
	if err := transportFlags(o, fs, tlsOpt, h2, h2Streams); err != nil {
		return o, err
	}
	if c.Dialer.TLS, err = tlsOpt.Config(); err != nil {
		return o, err
	}
	if h2 {
		c.Dialer.H2 = loadgen.NewH2Pool(h2Streams)
	}
	c.Seed = seed
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// transportFlags refuses transport flags that do not go together: the
// TLS flags without a wss:// URL, -h2-streams without -h2.
func transportFlags(o options, fs *flag.FlagSet, tlsOpt loadgen.TLSOptions, h2 bool, h2Streams int) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !strings.HasPrefix(o.cfg.URL, "wss://") {
		for _, name := range []string{"ca", "insecure", "tls"} {
			if set[name] {
				return fmt.Errorf("-%s goes with a wss:// URL, not %s", name, o.cfg.URL)
			}
		}
	}
	if set["h2-streams"] && !h2 {
		return errors.New("-h2-streams goes with -h2")
	}
	if h2Streams < 1 || h2Streams > 1<<20 {
		return fmt.Errorf("-h2-streams must be 1-%d, got %d", 1<<20, h2Streams)
	}
	if tlsOpt.Insecure && tlsOpt.CAFile != "" {
		return errors.New("-insecure checks no certificate: -ca is then pointless; give one of them")
	}
	return nil
}
