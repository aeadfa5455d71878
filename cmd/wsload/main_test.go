package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/loadgen"
	"github.com/wsgate/wsgate/internal/testproc"
	"github.com/wsgate/wsgate/relay-backend/relay"
)

// startRelay serves an in-process relay on a loopback port.
func startRelay(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := relay.New(relay.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go func() { _ = r.Serve(ln) }()
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return ln.Addr().String()
}

// wsload runs the built binary and returns its stdout, stderr and exit
// code.
func wsload(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	bin := testproc.Build(t, "./cmd/wsload")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run wsload: %v", err)
	}
	return out.String(), errb.String(), code
}

func TestIdleJSON(t *testing.T) {
	addr := startRelay(t)
	out, errs, code := wsload(t, "idle", "-url", "ws://"+addr+"/room/r%d", "-n", "50", "-hold", "1s", "-json",
		"-threshold", "dropped==0", "-threshold", "connected>=50")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	var r loadgen.Report
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value on stdout:\n%s", out)
	}
	if r.Scenario != "idle" || r.Connected != 50 || r.Held != 50 || !r.Passed || len(r.Thresholds) != 2 || r.RSSBytes <= 0 {
		t.Fatalf("report %+v", r)
	}
	if r.Connect.Hist != nil {
		t.Error("the final report carries raw histograms")
	}
	if !strings.Contains(errs, "wsload idle") {
		t.Errorf("no summary table on stderr:\n%s", errs)
	}
}

func TestExitCodes(t *testing.T) {
	addr := startRelay(t)
	url := "ws://" + addr + "/room/r%d"
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"threshold violated", []string{"idle", "-url", url, "-n", "5", "-hold", "100ms", "-threshold", "connected>5"}, exitFailed},
		{"unknown metric", []string{"idle", "-url", url, "-threshold", "nope<1"}, exitUsage},
		{"unknown scenario", []string{"soak", "-url", url}, exitUsage},
		{"no url", []string{"idle"}, exitUsage},
		{"procs merge", []string{"fanout", "-url", url, "-rooms", "4", "-members", "2", "-rate", "20", "-duration", "300ms", "-procs", "2",
			"-threshold", "delivered==100", "-threshold", "connected==8"}, exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := wsload(t, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errs)
			}
		})
	}
}
