// Package loadproc runs wsload as a separate process for the by-hand
// benchmark commands (bench/cmd/affinity, bench/cmd/twogw) and holds the
// little arithmetic their tables share. A run is started, remembered by its
// PID and stopped by that PID; its JSON report is read from stdout.
package loadproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/internal/stack"
	"github.com/wsgate/wsgate/bench/loadgen"
)

// Run is one wsload process started by Start. Wait must be called once;
// a Run must not be copied.
type Run struct {
	// Name names the run's log (DIR/NAME.log) and report (DIR/NAME.json).
	Name string
	dir  string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error
}

// Start runs `wsload args... -json` in the background: its table and
// errors go to dir/name.log, its JSON report to stdout (saved as
// dir/name.json by Wait). Cancelling ctx sends it SIGTERM, on which wsload
// stops and still reports; SIGKILL follows 15s later.
func Start(ctx context.Context, bin, dir, name string, args ...string) (*Run, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("wsload %s: %w", name, err)
	}
	defer logf.Close()
	r := &Run{Name: name, dir: dir, done: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, bin, append(slices.Clone(args), "-json")...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, logf
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	r.cmd.Cancel = func() error { return r.cmd.Process.Signal(syscall.SIGTERM) }
	r.cmd.WaitDelay = 15 * time.Second
	fmt.Fprintf(logf, "wsload %s\n", strings.Join(args, " "))
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("wsload %s: %w", name, err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	return r, nil
}

// Done is closed when the process has exited.
func (r *Run) Done() <-chan struct{} { return r.done }

// Wait waits for the process and decodes its report. A run whose
// thresholds failed (exit 1) still returns its report.
func (r *Run) Wait() (*loadgen.Report, error) {
	<-r.done
	_ = os.WriteFile(filepath.Join(r.dir, r.Name+".json"), r.out.Bytes(), 0o644)
	var rep loadgen.Report
	if err := json.Unmarshal(r.out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("wsload %s: %v; no report: %w (see %s.log)", r.Name, r.err, err, r.Name)
	}
	return &rep, nil
}

// Median is the middle value of xs (the mean of the two middle ones for an
// even count), NaN for none; NaN values are ignored.
func Median(xs []float64) float64 {
	s := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// MaxDeviation is the largest distance of a value of counts from their
// mean, as a fraction of the mean (0.1 = ±10%); 0 when the mean is 0.
func MaxDeviation(counts []int) float64 {
	if len(counts) == 0 {
		return 0
	}
	sum := 0
	for _, c := range counts {
		sum += c
	}
	mean := float64(sum) / float64(len(counts))
	if mean == 0 {
		return 0
	}
	var dev float64
	for _, c := range counts {
		dev = max(dev, math.Abs(float64(c)-mean))
	}
	return dev / mean
}

// LoadAvg is the first three fields of /proc/loadavg ("?" if unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// ModuleRoot is the directory of the go.mod of the module the command runs
// in (go env GOMOD), where stack.Build builds the binaries from.
func ModuleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run inside the wsgate module")
	}
	return filepath.Dir(mod), nil
}

// WaitIdle waits, at most 30s, until none of relays holds a connection, so
// that a run starts from empty relays; dir is named in the error.
func WaitIdle(relays []*stack.Relay, dir string) error {
	for range 300 {
		busy := 0
		for _, r := range relays {
			ri, err := r.Info()
			if err != nil {
				return err
			}
			busy += ri.Connections
		}
		if busy == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("relays still hold connections 30s after a run (logs in %s)", dir)
}

// Main runs a command's run function with a context that SIGINT and
// SIGTERM cancel, and exits 1 when it fails (printing the error after name,
// except for -h).
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, name+":", err)
		}
		os.Exit(1)
	}
}

// Env is what Up started: the stack, the binaries it runs and the
// directory holding the logs, configs and raw reports.
type Env struct {
	Stack *stack.Stack
	Bins  stack.Binaries
	Dir   string
}

// Up builds wsgate, relay-backend and wsload into dir/bin (dir "" = a new
// directory in $TMPDIR named after the command) and starts opt's stack
// with dir for its logs and configs. stop, never nil, stops what was
// started and removes the binaries; it is to be called even on an error.
func Up(ctx context.Context, name, dir string, opt stack.Options, log io.Writer) (env Env, stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "wsgate-"+name+"-"); err != nil {
			return env, stop, err
		}
	}
	env.Dir = dir
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return env, stop, err
	}
	undo = append(undo, func() { os.RemoveAll(binDir) })
	fmt.Fprintf(log, "%s: building into %s; logs and raw reports in %s\n", name, binDir, dir)
	root, err := ModuleRoot()
	if err != nil {
		return env, stop, err
	}
	if env.Bins, err = stack.Build(ctx, root, binDir); err != nil {
		return env, stop, err
	}
	opt.Dir, opt.Bins = dir, env.Bins
	env.Stack, err = stack.Up(opt)
	if env.Stack != nil {
		undo = append(undo, env.Stack.Close)
	}
	return env, stop, err
}
