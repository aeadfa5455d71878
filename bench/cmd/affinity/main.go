// Command affinity measures what room affinity saves: the same fan-out
// (rooms × members, every member sending) through a gateway whose pool is
// balance = "least_conn" and through one whose pool is balance = "hash"
// keyed by the room id (hash_key = "path:2"), in the same run, in front of
// the same relay-backend replicas on one real redis-server. The policies
// take turns, -reps times each, and the table gives medians of: frames
// delivered, Redis PUBLISH calls and commands, relay replicas subscribed
// per room (PUBSUB NUMSUB while every member is connected), the pub/sub
// deliveries that implies, Redis's output bytes and CPU, and the relays'
// CPU (utime+stime from /proc/PID/stat) per million delivered frames.
//
// Usage (from the module root; see docs/benchmarks.md):
//
//	go run ./bench/cmd/affinity [-relays 3] [-rooms 30] [-members 20]
//	    [-size 200] [-rate 1] [-duration 10s] [-reps 3] [-factors 0.25] [-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/stack"
)

// channelPrefix is the relays' pub/sub channel prefix (their default).
const channelPrefix = "wsgate:room:"

// plan is the fan-out each run makes.
type plan struct {
	relays, rooms, members, size, reps int
	rate                               float64
	duration                           time.Duration
	factors                            []float64
}

// policy is one gateway under measurement.
type policy struct {
	name string
	gw   *stack.Gateway
}

// result is what one run measured.
type result struct {
	received  float64 // frames delivered to members (unique)
	delivered float64 // % of the expected deliveries
	failed    int64
	publish   float64 // cmdstat_publish calls (the room log's script publishes)
	commands  float64 // total_commands_processed
	netOut    float64 // Redis total_net_output_bytes
	redisCPU  time.Duration
	relayCPU  time.Duration
	subsMean  float64 // relays subscribed per room while all were connected
	subsMax   float64
	single    float64 // rooms whose members all sit on one relay
	sampled   bool    // a sample with every member connected was taken
	split     []int   // connections per relay in that sample
}

func main() { loadproc.Main("affinity", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var p plan
	var dir, factors string
	fs := flag.NewFlagSet("affinity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&p.relays, "relays", 3, "relay-backend replicas on one redis-server (2-8)")
	fs.IntVar(&p.rooms, "rooms", 30, "rooms")
	fs.IntVar(&p.members, "members", 20, "members per room, every one sending")
	fs.IntVar(&p.size, "size", 200, "message size in bytes (at least 32)")
	fs.Float64Var(&p.rate, "rate", 1, "messages per second per member")
	fs.DurationVar(&p.duration, "duration", 10*time.Second, "how long members send, per run")
	fs.IntVar(&p.reps, "reps", 3, "runs per policy, the policies taking turns")
	fs.StringVar(&factors, "factors", "0.25", "hash_balance_factor of each hash gateway, comma separated (0.25 is the default)")
	fs.StringVar(&dir, "dir", "", "directory for logs, configs and raw reports (default: a new one in $TMPDIR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range strings.Split(factors, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("-factors: %q is not a positive number", f)
		}
		p.factors = append(p.factors, v)
	}
	switch {
	case p.relays < 2 || p.relays > 8:
		return errors.New("-relays must be 2-8")
	case p.rooms < 1 || p.members < 2 || p.reps < 1 || p.rate <= 0 || p.duration <= 0 || p.size < 32:
		return errors.New("-rooms, -reps, -rate and -duration must be positive, -members at least 2, -size at least 32")
	}
	env, stop, err := loadproc.Up(ctx, "affinity", dir, stack.Options{Relays: p.relays, Gateways: 1}, stderr)
	defer stop()
	st, bins, dir := env.Stack, env.Bins, env.Dir
	if err != nil {
		return err
	}
	pols := []policy{{name: "least_conn", gw: st.Gateways[0]}}
	for i, f := range p.factors {
		gw, err := startHashGateway(st, bins.WSGate, dir, f, i)
		if err != nil {
			return err
		}
		defer gw.Stop(10 * time.Second)
		pols = append(pols, policy{name: fmt.Sprintf("hash (factor %g)", f), gw: gw})
	}
	rdb := redis.NewClient(&redis.Options{Addr: st.RedisAddr})
	defer rdb.Close()
	m := &meter{p: p, st: st, rdb: rdb, bins: bins, dir: dir, log: stderr}

	start, load0 := time.Now(), loadproc.LoadAvg()
	res := make([][]result, len(pols))
	for rep := range p.reps {
		for k := range pols {
			i := (k + rep) % len(pols) // the first policy of a round rotates
			r, err := m.measure(ctx, pols[i], rep)
			if err != nil {
				return err
			}
			res[i] = append(res[i], r)
		}
	}
	fmt.Fprintf(stdout, "room affinity: %d rooms x %d members, %d-byte messages, %g msg/s per member for %v, %d relays on one redis-server, %d runs per policy taking turns; median of %d\n\n",
		p.rooms, p.members, p.size, p.rate, p.duration, p.relays, p.reps, p.reps)
	fmt.Fprintf(stdout, "machine: %d CPUs, %s; load average %s at start, %s at end; took %v\n\n",
		runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, load0, loadproc.LoadAvg(), time.Since(start).Round(time.Second))
	writeTable(stdout, pols, res)
	return nil
}

// startHashGateway starts a wsgate with the stack's gateway config but a
// hash pool keyed by the room id, the second path segment of /room/ID.
func startHashGateway(st *stack.Stack, bin, dir string, factor float64, i int) (*stack.Gateway, error) {
	addr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	const lc = "balance = \"least_conn\"\n"
	cfg := st.GatewayConfig(addr, admin)
	if !strings.Contains(cfg, lc) {
		return nil, errors.New("the stack's gateway config has no least_conn pool to replace")
	}
	cfg = strings.Replace(cfg, lc, fmt.Sprintf("balance = \"hash\"\nhash_key = \"path:2\"\nhash_balance_factor = %g\n", factor), 1)
	name := fmt.Sprintf("wsgate-hash-%d", i+1)
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	proc, err := stack.Start(name, filepath.Join(dir, name+".log"), bin, "-config", path)
	if err != nil {
		return nil, err
	}
	gw := &stack.Gateway{Proc: proc, Addr: addr, Admin: admin, Config: path}
	for range 150 {
		select {
		case <-proc.Done():
			return nil, fmt.Errorf("%s exited (log %s)", name, proc.Log)
		default:
		}
		if resp, err := http.Get("http://" + admin + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return gw, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	proc.Stop(time.Second)
	return nil, fmt.Errorf("%s not ready after 15s (log %s)", name, proc.Log)
}
