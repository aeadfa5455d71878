// Command twogw measures how evenly several gateways spread connections
// over the relays when each balances only by its own counts: two wsgate
// processes (same config, least_conn, different ports) in front of the same
// relay-backend replicas on one redis-server, one wsload source each. Every
// 500ms it reads every relay's /info connections and takes the largest
// distance of a relay from the relays' mean, as a fraction of that mean;
// the table gives, per case, the median over -reps runs of each run's
// largest and median deviation, and the worst sample seen.
//
// Usage (from the module root; see docs/benchmarks.md):
//
//	go run ./bench/cmd/twogw [-relays 3] [-reps 3] [-only CASE] [-dir DIR] [-shared]
//
// With -shared the gateways share their live counts through the stack's
// Redis ([pools.shared_counts]) instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/stack"
)

// source is one gateway's clients: a wsload run, repeated runs times one
// after another (waves of short-lived connections).
type source struct {
	desc string
	args []string // wsload arguments after -url
	runs int
}

// scenario is one case: source a through gateway 1, source b through
// gateway 2 (through gateway 1 too when oneGateway is set, the comparison
// with a single gateway), started together. With restart, relay 1 is
// killed (SIGKILL) 3s in and started again on its address 1s later; only
// the samples from when every gateway in use shows it up again count (a
// node that failed dials is ejected for pools.health.eject_for, 10s).
type scenario struct {
	name       string
	a, b       source
	restart    bool
	oneGateway bool
}

// steady600 is gateway 1's source of the cases without a restart.
var steady600 = source{"idle 600, held 12s", []string{"idle", "-n", "600", "-rate", "300", "-hold", "12s", "-rooms", "30"}, 1}

// reconnecting600 is gateway 1's source of the restart cases: relay.v1
// fan-out members (30 rooms x 20, 0.2 msg/s each) that come back within 2s
// of a drop; the kill itself is twogw's, so -kill-cmd is a no-op.
var reconnecting600 = source{"600 fan-out members that reconnect within 2s of a drop",
	[]string{"kill", "-rooms", "30", "-members", "20", "-rate", "0.2", "-duration", "26s", "-connect-rate", "300",
		"-kill-cmd", "true", "-after", "1s", "-window", "2s", "-give-up", "20s", "-settle", "2s"}, 1}

// waves is a source of short-lived connections.
var waves = func(n int) source {
	return source{fmt.Sprintf("%d waves of idle 300 held 1s", n), []string{"idle", "-n", "300", "-rate", "1000", "-hold", "1s", "-rooms", "30"}, n}
}

var scenarios = []scenario{
	{name: "symmetric",
		a: source{"idle 300, held 12s", []string{"idle", "-n", "300", "-rate", "300", "-hold", "12s", "-rooms", "30"}, 1},
		b: source{"idle 300, held 12s", []string{"idle", "-n", "300", "-rate", "300", "-hold", "12s", "-rooms", "30"}, 1}},
	{name: "steady + churn", a: steady600,
		b: source{"churn 40 workers (connect, one round trip, close) for 12s", []string{"churn", "-c", "40", "-duration", "12s"}, 1}},
	{name: "steady + waves", a: steady600, b: waves(6)},
	{name: "steady + reconnect storm", a: steady600,
		b: source{"reconnect-storm 300: all drop at 3s, back within 2s", []string{"reconnect-storm", "-n", "300", "-rate", "300", "-after", "3s", "-window", "2s", "-rooms", "30"}, 1}},
	{name: "relay 1 restarted, two gateways", a: reconnecting600, b: waves(17), restart: true},
	{name: "relay 1 restarted, one gateway (comparison)", a: reconnecting600, b: waves(17), restart: true, oneGateway: true},
}

func main() { loadproc.Main("twogw", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("twogw", flag.ContinueOnError)
	fs.SetOutput(stderr)
	relays := fs.Int("relays", 3, "relay-backend replicas (2-8)")
	reps := fs.Int("reps", 3, "runs per case")
	only := fs.String("only", "", "run only the cases whose name contains this")
	dir := fs.String("dir", "", "directory for logs, configs and raw reports (default: a new one in $TMPDIR)")
	shared := fs.Bool("shared", false, "share live counts through the stack's Redis ([pools.shared_counts], default interval)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *relays < 2 || *relays > 8 || *reps < 1 {
		return errors.New("-relays must be 2-8 and -reps positive")
	}
	if *only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(sc scenario) bool { return !strings.Contains(sc.name, *only) })
		if len(scenarios) == 0 {
			return fmt.Errorf("-only %q matches no case", *only)
		}
	}
	env, stop, err := loadproc.Up(ctx, "twogw", *dir, stack.Options{Relays: *relays, Gateways: 2}, stderr)
	defer stop()
	st, bins := env.Stack, env.Bins
	if err != nil {
		return err
	}
	counts := "own counts each"
	if *shared {
		if err := shareCounts(st); err != nil {
			return err
		}
		counts = "shared counts through Redis"
	}
	m := &meter{st: st, bins: bins, dir: env.Dir, log: stderr}
	start, load0 := time.Now(), loadproc.LoadAvg()
	res := make([][]spread, len(scenarios))
	for rep := range *reps {
		for i, sc := range scenarios {
			s, err := m.measure(ctx, sc, rep)
			if err != nil {
				return err
			}
			res[i] = append(res[i], s)
		}
	}
	fmt.Fprintf(stdout, "two gateways (least_conn, %s) in front of %d relays, one wsload source each; relays' /info connections every 500ms; %d runs per case\n\n", counts, *relays, *reps)
	fmt.Fprintf(stdout, "machine: %d CPUs, %s/%s; load average %s at start, %s at end; took %v\n\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, load0, loadproc.LoadAvg(), time.Since(start).Round(time.Second))
	writeTable(stdout, res)
	if *shared {
		fmt.Fprintln(stdout)
		writeExchanges(stdout, st, time.Since(start))
	}
	return nil
}
