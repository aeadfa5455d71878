package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/wsgate/wsgate/bench/internal/stack"
)

// target is one place wsload connects to: relay 1 directly, or a proxy in
// front of both relays.
type target struct {
	col  int    // its table column, colDirect..colHAProxy
	addr string // where wsload connects; "" when it is not measured
	why  string // why it is not measured
	// pids are the processes whose memory and CPU are the target's.
	pids func() ([]int, error)
	// conns counts the client connections it holds now, as the relays see
	// them.
	conns func() (int, error)
}

func (t *target) name() string { return colNames[t.col] }

// proxy says the target is a proxy in front of both relays.
func (t *target) proxy() bool { return t.col != colDirect }

// targets builds the columns' targets over the stack: relay 1, the
// gateway, the gateway held to one core when the stack has it, and nginx
// and HAProxy when each is installed and starts. A
// missing peer is reported on log and its column reads n/a; a peer that is
// installed but does not start is an error.
func targets(st *stack.Stack, peers bool, log io.Writer) ([numCols]*target, error) {
	var ts [numCols]*target
	gw := st.Gateways[0]
	allConns := func() (int, error) {
		n := 0
		for _, rl := range st.Relays {
			info, err := rl.Info()
			if err != nil {
				return 0, err
			}
			n += info.Connections
		}
		return n, nil
	}
	// Relay 1 as it is now: the storm restarts it.
	ts[colDirect] = &target{col: colDirect, addr: st.Relays[0].Addr,
		pids: func() ([]int, error) { return []int{st.Relays[0].Pid()}, nil },
		conns: func() (int, error) {
			info, err := st.Relays[0].Info()
			return info.Connections, err
		}}
	ts[colWSGate] = &target{col: colWSGate, addr: gw.Addr,
		pids:  func() ([]int, error) { return []int{gw.Pid()}, nil },
		conns: allConns}
	ts[colWSGate1] = &target{col: colWSGate1, why: "not run",
		pids: func() ([]int, error) { return nil, errors.New("not running") }, conns: allConns}
	if g := st.OneCore; g != nil {
		ts[colWSGate1].addr, ts[colWSGate1].why = g.Addr, ""
		ts[colWSGate1].pids = func() ([]int, error) { return []int{g.Pid()}, nil }
	}
	ts[colWSGateH2] = &target{col: colWSGateH2, why: "not run",
		pids: func() ([]int, error) { return nil, errors.New("not running") }, conns: allConns}
	if g := st.H2; g != nil {
		ts[colWSGateH2].addr, ts[colWSGateH2].why = g.Addr, ""
		ts[colWSGateH2].pids = func() ([]int, error) { return []int{g.Pid()}, nil }
	}
	for _, c := range []struct {
		col  int
		kind string
	}{{colNginx, stack.Nginx}, {colHAProxy, stack.HAProxy}} {
		col, kind := c.col, c.kind
		t := &target{col: col, pids: func() ([]int, error) { return nil, errors.New("not running") }, conns: allConns}
		ts[col] = t
		if !peers {
			t.why = "not run"
			continue
		}
		bin, err := stack.FindPeer(kind)
		if errors.Is(err, stack.ErrPeerMissing) {
			t.why = err.Error()
			fmt.Fprintf(log, "benchrun: %v; its column reads n/a (`make bench` installs it when run as root)\n", err)
			continue
		}
		if err != nil {
			return ts, err
		}
		p, err := st.StartPeer(kind, bin)
		if err != nil {
			return ts, err
		}
		t.addr, t.pids = p.Addr, p.Pids
		fmt.Fprintf(log, "benchrun: %s %s on %s (config %s)\n", kind, bin, p.Addr, p.Config)
	}
	return ts, nil
}

// live are the targets measured, in column order.
func (r *runner) live() []*target {
	var ts []*target
	for _, t := range r.targets {
		if t.addr != "" {
			ts = append(ts, t)
		}
	}
	return ts
}

// rotation is the order of the live targets in repetition i: column
// order rotated left by i, so each repetition puts every target at a new
// position (when other work on the machine may have started). Over fewer
// repetitions than targets some pairs keep their order.
func rotation(ts []*target, i int) []*target {
	out := make([]*target, 0, len(ts))
	for k := range ts {
		out = append(out, ts[(k+i)%len(ts)])
	}
	return out
}
