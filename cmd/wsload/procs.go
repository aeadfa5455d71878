package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/wsgate/wsgate/bench/loadgen"
)

// execute runs the scenario in this process (-procs 1, or as a child) or
// in o.procs child processes whose reports it merges.
func execute(ctx context.Context, o options, args []string, stderr io.Writer) (*loadgen.Report, error) {
	if o.child >= 0 {
		c := o.cfg.Split(o.child, o.procs)
		c.Log = stderr
		return loadgen.Run(ctx, c)
	}
	if o.procs == 1 {
		c := o.cfg
		c.Log = stderr
		return loadgen.Run(ctx, c)
	}
	return runChildren(ctx, o, args, stderr)
}

// runChildren re-executes this binary o.procs times with the same flags
// plus -child i and the run's seed, and merges their JSON reports.
func runChildren(ctx context.Context, o options, args []string, stderr io.Writer) (*loadgen.Report, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable for -procs: %w", err)
	}
	reports := make([]*loadgen.Report, o.procs)
	errs := make([]error, o.procs)
	var wg sync.WaitGroup
	for i := range o.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = runChild(ctx, self, args, i, o, stderr)
		}()
	}
	wg.Wait()
	merged := loadgen.NewReport(o.cfg.Scenario)
	merged.Procs = 0
	var first error
	for i, r := range reports {
		if errs[i] != nil && first == nil {
			first = errs[i]
		}
		if r != nil {
			merged.Merge(r)
			merged.Procs++
		}
	}
	if merged.Procs == 0 {
		return nil, first
	}
	merged.URL = o.cfg.URL
	merged.Finalize()
	return merged, first
}

// runChild runs child i and decodes its report.
func runChild(ctx context.Context, self string, args []string, i int, o options, stderr io.Writer) (*loadgen.Report, error) {
	cargs := append(append([]string{}, args...),
		"-child", strconv.Itoa(i), "-seed", strconv.FormatUint(o.cfg.Seed, 10))
	cmd := exec.CommandContext(ctx, self, cargs...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = stderr
	runErr := cmd.Run()
	var r loadgen.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("child %d: %w", i, runErr)
		}
		return nil, fmt.Errorf("child %d: decode report: %w", i, err)
	}
	if runErr != nil {
		return &r, fmt.Errorf("child %d: %w", i, runErr)
	}
	return &r, nil
}

func writeJSON(w io.Writer, r *loadgen.Report) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
