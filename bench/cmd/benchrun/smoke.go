package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/wsgate/wsgate/bench/loadgen"
)

// smokeChecks are the CI smoke scenarios through the gateway. The
// thresholds are generous on purpose: they catch a gateway that loses
// messages, fails handshakes or drops idle tunnels, not a slow machine.
var smokeChecks = []struct {
	name string
	args []string
}{
	{"fanout", []string{"fanout", "-rooms", "10", "-members", "5", "-rate", "5", "-duration", "5s", "-settle", "3s",
		"-threshold", "delivered>=99", "-threshold", "p99<2s", "-threshold", "failed==0"}},
	{"idle", []string{"idle", "-n", "200", "-rate", "500", "-hold", "3s",
		"-threshold", "connected==200", "-threshold", "dropped==0", "-threshold", "failed==0"}},
}

// smoke runs smokeChecks and fails when a threshold is violated.
func (r *runner) smoke(ctx context.Context, w io.Writer) error {
	var failed []string
	passed, broken := 0, 0
	for _, c := range smokeChecks {
		args := append([]string{c.args[0], "-url", r.url(r.st.Gateways[0].Addr, "smoke")}, c.args[1:]...)
		rp, err := r.load(ctx, "smoke-"+c.name, args...)
		if err != nil {
			return err
		}
		for _, t := range rp.Thresholds {
			fmt.Fprintf(w, "smoke %-6s %-18s actual %-10g %s\n", c.name, t.Expr, t.Actual, okText(t.Passed))
			if t.Passed {
				passed++
			} else {
				broken++
			}
		}
		if !rp.Passed || len(rp.Thresholds) == 0 {
			failed = append(failed, c.name)
			fmt.Fprint(w, reportLine(rp))
		}
	}
	// The plain closing line CI reads: thresholds passed and failed.
	fmt.Fprintf(w, "smoke: %d passed, %d failed\n", passed, broken)
	if len(failed) > 0 {
		return fmt.Errorf("smoke failed: %v (logs in %s): %w", failed, r.dir, errSmoke)
	}
	return nil
}

var errSmoke = errors.New("threshold violated")

func okText(ok bool) string {
	if ok {
		return "ok"
	}
	return "VIOLATED"
}

func reportLine(rp *loadgen.Report) string {
	return fmt.Sprintf("  connected %d failed %d %v dropped %d %v delivered %.2f%% p99 %.1fms\n",
		rp.Connected, rp.Failed, rp.FailedBy, rp.Dropped, rp.DroppedBy, rp.Delivered, rp.P99)
}
