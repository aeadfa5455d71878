package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// The victims and their echo node run in a process of their own (this
// command again, with -victim-side), so that the attacker's goroutines
// and garbage never delay a victim's round trip or its node: what the
// figures show is the gateway's doing (and the machine's), not the
// attacking process's scheduler's. The two speak by lines:
//
//	victim side:  node ADDR            (its echo node is listening)
//	parent:       dial ws|get ADDR     (the gateway's TLS listener)
//	victim side:  ready | error TEXT
//	parent:       next                 (ends a period: baseline, then attack)
//	victim side:  {periodStats as JSON}
//
// and the victim side exits when its standard input ends.

// periodStats is one period's figures as the victim side sends them.
type periodStats struct {
	P50, P99  time.Duration
	Sent, OK  int
	FirstFail string
	// Posts is how many POSTs the echo node got so far.
	Posts int64
}

// victimSide is the parent's end of a victim-side process.
type victimSide struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	node string
}

// startVictimSide starts the victim side and reads its node's address.
func startVictimSide(o options, logPath string) (*victimSide, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(exe, "-victim-side", "-victims", fmt.Sprint(o.victims), "-interval", o.interval.String())
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	v := &victimSide{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	line, err := v.line()
	if err == nil {
		var ok bool
		if v.node, ok = strings.CutPrefix(line, "node "); !ok {
			err = fmt.Errorf("victim side: %q, want its node's address", line)
		}
	}
	if err != nil {
		v.stop()
		return nil, err
	}
	return v, nil
}

// line reads one line of the victim side, within 30 s.
func (v *victimSide) line() (string, error) {
	type read struct {
		s   string
		err error
	}
	ch := make(chan read, 1)
	go func() {
		s, err := v.out.ReadString('\n')
		ch <- read{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return "", fmt.Errorf("victim side (log %s): %w", v.cmd.Stderr.(*os.File).Name(), r.err)
		}
		return r.s, nil
	case <-time.After(30 * time.Second):
		return "", errors.New("victim side: no answer in 30s")
	}
}

// dial has the victims dial the gateway at addr: "ws" for WebSocket
// echo clients, "get" for plain GETs.
func (v *victimSide) dial(kind, addr string) error {
	if _, err := fmt.Fprintf(v.in, "dial %s %s\n", kind, addr); err != nil {
		return err
	}
	line, err := v.line()
	if err != nil {
		return err
	}
	if line != "ready" {
		return fmt.Errorf("victims: %s", line)
	}
	return nil
}

// next ends the current period and returns its figures.
func (v *victimSide) next() (periodStats, error) {
	var s periodStats
	if _, err := io.WriteString(v.in, "next\n"); err != nil {
		return s, err
	}
	line, err := v.line()
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal([]byte(line), &s)
}

// stop ends the victim side: its input closed, then SIGKILL by its PID
// if it has not exited within 5 s.
func (v *victimSide) stop() {
	v.in.Close()
	done := make(chan struct{})
	go func() { _ = v.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = v.cmd.Process.Kill()
		<-done
	}
}

// stats turns a period's figures into the table's.
func (s periodStats) stats() victimStats {
	return victimStats{p50: s.P50, p99: s.P99, sent: s.Sent, ok: s.OK, firstFail: s.FirstFail}
}

// runVictimSide is the victim-side process: its echo node, then the
// victims once told where to dial, their figures at each "next".
func runVictimSide(ctx context.Context, o options, in io.Reader, out io.Writer) error {
	node, err := startEchoNode()
	if err != nil {
		return err
	}
	defer node.close()
	fmt.Fprintf(out, "node %s\n", node.addr())
	sc := bufio.NewScanner(in)
	var v *victims
	defer func() {
		if v != nil {
			v.end()
		}
	}()
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "dial" && v == nil:
			dial := func(i int) (victimClient, error) { return dialWSVictim(f[2], fmt.Sprintf("/echo/victim-%d", i)) }
			if f[1] == "get" {
				dial = func(i int) (victimClient, error) { return dialGetVictim(f[2], fmt.Sprintf("/get/victim-%d", i)) }
			}
			if v, err = startVictims(ctx, o.victims, o.interval, dial); err != nil {
				fmt.Fprintf(out, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
				continue
			}
			fmt.Fprintln(out, "ready")
		case len(f) == 1 && f[0] == "next" && v != nil:
			s := v.next()
			b, _ := json.Marshal(periodStats{P50: s.p50, P99: s.p99, Sent: s.sent, OK: s.ok, FirstFail: s.firstFail, Posts: node.posts.Load()})
			fmt.Fprintf(out, "%s\n", b)
		default:
			fmt.Fprintf(out, "error unknown command %q\n", sc.Text())
		}
	}
	return sc.Err()
}
