package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/loadgen"
)

// loadRun is one wsload process started by startLoad.
type loadRun struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error
}

// startLoad runs `wsload args... -json` in the background; its table and
// errors go to DIR/NAME.log and its JSON report to DIR/NAME.json once done.
// Cancelling ctx sends it SIGTERM (wsload stops and reports), then SIGKILL
// after 15s.
func (r *runner) startLoad(ctx context.Context, name string, args ...string) (*loadRun, error) {
	logf, err := os.Create(filepath.Join(r.dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("wsload %s: %w", name, err)
	}
	defer logf.Close()
	l := &loadRun{name: name, done: make(chan struct{})}
	l.cmd = exec.CommandContext(ctx, r.bins.WSLoad, append(args, "-json")...)
	l.cmd.Stdout, l.cmd.Stderr = &l.out, logf
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	l.cmd.Cancel = func() error { return l.cmd.Process.Signal(syscall.SIGTERM) }
	l.cmd.WaitDelay = 15 * time.Second
	fmt.Fprintf(logf, "wsload %q\n", args)
	if err := l.cmd.Start(); err != nil {
		return nil, fmt.Errorf("wsload %s: %w", name, err)
	}
	go func() {
		l.err = l.cmd.Wait()
		close(l.done)
	}()
	return l, nil
}

// wait waits for the run and decodes its report. A run whose thresholds
// failed (exit 1) still returns its report; passed says so.
func (l *loadRun) wait(dir string) (*loadgen.Report, error) {
	<-l.done
	_ = os.WriteFile(filepath.Join(dir, l.name+".json"), l.out.Bytes(), 0o644)
	var rep loadgen.Report
	if err := json.Unmarshal(l.out.Bytes(), &rep); err != nil {
		return nil, fmt.Errorf("wsload %s: %v; no report: %w (see %s.log)", l.name, l.err, err, l.name)
	}
	return &rep, nil
}

// load runs wsload to the end and returns its report.
func (r *runner) load(ctx context.Context, name string, args ...string) (*loadgen.Report, error) {
	l, err := r.startLoad(ctx, name, args...)
	if err != nil {
		return nil, err
	}
	return l.wait(r.dir)
}
