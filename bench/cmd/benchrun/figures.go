package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/loadgen"
)

// idleResult is what one idle ramp measured.
type idleResult struct {
	perConn     float64 // RSS growth of the measured processes per connection, bytes
	kernelPer   float64 // slab growth of the whole system per connection, bytes; NaN unless root
	loadPerConn float64 // wsload's own RSS per connection, bytes
	connected   int64
	dropped     int64
	split       []int // connections per relay (/info) during the hold, proxies only
}

// idle ramps r.plan.idleN idle connections to target t and measures the
// RSS growth of its processes (VmRSS from /proc/PID/status, summed over
// them), read once every connection is open as the relays count them and
// the counts have settled (median of three reads).
func (r *runner) idle(ctx context.Context, t *target) (idleResult, error) {
	var res idleResult
	n := r.plan.idleN
	pids, err := t.pids()
	if err != nil {
		return res, err
	}
	before, err := probe.RSSSum(pids)
	if err != nil {
		return res, err
	}
	// The kernel's memory for the sockets: slab growth, system-wide
	// (wsload's sockets included, as every target has them).
	slabBefore, slabErr := probe.SlabTotal()
	l, err := r.startLoad(ctx, "idle-"+t.name(), "idle", "-url", r.url(t.addr, "idle"),
		"-n", strconv.Itoa(n), "-rate", strconv.Itoa(r.plan.idleRate), "-hold", r.plan.idleHold.String(), "-threshold", "dropped==0")
	if err != nil {
		return res, err
	}
	// Poll until all n are open, bounded by the ramp time plus a margin.
	deadline := time.Now().Add(time.Duration(n)*time.Second/time.Duration(r.plan.idleRate) + 30*time.Second)
	for got := 0; got < n; {
		select {
		case <-l.done:
			return res, fmt.Errorf("idle %s: wsload ended with %d of %d open", t.name(), got, n)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("idle %s: %d of %d open after the ramp", t.name(), got, n)
		}
		got, err = t.conns()
		if err != nil {
			return res, err
		}
	}
	// The last handshakes' garbage and buffers settle for a moment; then
	// three reads half a second apart.
	time.Sleep(2 * time.Second)
	var rss, slab []float64
	for range 3 {
		v, err := probe.RSSSum(pids)
		if err != nil {
			return res, err
		}
		rss = append(rss, float64(v))
		if sv, err := probe.SlabTotal(); err == nil {
			slab = append(slab, float64(sv))
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.perConn = (loadproc.Median(rss) - float64(before)) / float64(n)
	res.kernelPer = math.NaN()
	if slabErr == nil && len(slab) == 3 {
		res.kernelPer = (loadproc.Median(slab) - float64(slabBefore)) / float64(n)
	}
	if t.proxy() {
		for _, rl := range r.st.Relays {
			info, err := rl.Info()
			if err != nil {
				return res, err
			}
			res.split = append(res.split, info.Connections)
		}
	}
	rep, err := l.wait(r.dir)
	if err != nil {
		return res, err
	}
	res.loadPerConn, res.connected, res.dropped = rep.RSSPerConnBytes, rep.Connected, rep.Dropped
	r.progress("idle %s: %.0f bytes per connection (kernel %.0f), connected %d dropped %d, split %v",
		t.name(), res.perConn, res.kernelPer, res.connected, res.dropped, res.split)
	return res, nil
}

// fanoutResult is what one fanout run measured.
type fanoutResult struct {
	p50, p99     float64 // propagation latency, ms
	delivered    float64 // percent
	failed       int64   // handshakes and writes that failed
	frames       float64 // wsload's sent plus received messages
	cpu          time.Duration
	cpuPerMframe float64 // CPU seconds per million frames
	relayCPU     time.Duration
}

// framesPerSec is the fanout's nominal frame rate: every member sends rate
// messages per second and every other member of its room receives each,
// so members × rate × members-per-room frames per second cross a proxy
// (one message sent plus members-1 received).
func (p plan) framesPerSec(rate float64) float64 {
	return float64(p.fanRooms*p.fanMembers*p.fanMembers) * rate
}

// memberRate is the per-member message rate of a fanout at framesPerSec.
func (p plan) memberRate(framesPerSec float64) float64 {
	return framesPerSec / float64(p.fanRooms*p.fanMembers*p.fanMembers)
}

// fanout runs the fixed fanout (rooms × members, fps frames per second in
// all) for d against target t. The frames are wsload's sent plus received
// messages; direct, the CPU is both relays'; through a proxy, the proxy's.
func (r *runner) fanout(ctx context.Context, t *target, name string, fps float64, d time.Duration) (fanoutResult, error) {
	var res fanoutResult
	pids, err := t.pids()
	if err != nil {
		return res, err
	}
	relayCPU0, err := r.relayCPU()
	if err != nil {
		return res, err
	}
	cpu0, err := probe.CPUSum(pids)
	if err != nil {
		return res, err
	}
	p := r.plan
	rate := strconv.FormatFloat(p.memberRate(fps), 'f', -1, 64)
	rp, err := r.load(ctx, fmt.Sprintf("%s-%s", name, t.name()), "fanout", "-url", r.url(t.addr, "fan"),
		"-rooms", strconv.Itoa(p.fanRooms), "-members", strconv.Itoa(p.fanMembers), "-rate", rate,
		"-size", "64", "-duration", d.String(), "-settle", "2s")
	if err != nil {
		return res, err
	}
	if rp.Connected == 0 {
		return res, fmt.Errorf("fanout %s: no connection succeeded", t.name())
	}
	relayCPU1, err := r.relayCPU()
	if err != nil {
		return res, err
	}
	cpu1, err := probe.CPUSum(pids)
	if err != nil {
		return res, err
	}
	res.p50, res.p99, res.delivered, res.failed = rp.Latency.P50, rp.Latency.P99, rp.Delivered, rp.Failed
	res.relayCPU = relayCPU1 - relayCPU0
	res.frames = float64(rp.Sent + rp.Received)
	res.cpu = cpu1 - cpu0
	if !t.proxy() {
		res.cpu = res.relayCPU
	}
	res.cpuPerMframe = math.NaN()
	if res.frames > 0 {
		res.cpuPerMframe = res.cpu.Seconds() / res.frames * 1e6
	}
	r.progress("%s %s: %.0f frames/s nominal, %.0f frames, %v CPU (relays %v), p50 %.2fms p99 %.2fms, delivered %.2f%%, failed %d",
		name, t.name(), fps, res.frames, res.cpu, res.relayCPU, res.p50, res.p99, res.delivered, res.failed)
	return res, nil
}

// ladderResult is the top of one frame-rate ladder.
type ladderResult struct {
	held   float64 // highest step held, frames/s; 0 = none
	failed float64 // first step not held, frames/s; 0 = every step held
	p99    float64 // p99 at the highest step held, ms
}

// ladder runs fanouts at r.plan.ladder's frame rates, lowest first,
// against target t. A step is held when its p99 is under ladderP99, it
// delivered 99.9% or more and nothing failed; a step not held is tried
// once more (a burst of other work on a shared machine should not end the
// ladder), and the ladder stops at the first step not held twice.
func (r *runner) ladder(ctx context.Context, t *target) (ladderResult, error) {
	var res ladderResult
	for _, fps := range r.plan.ladder {
		held := false
		for try := 1; try <= 2 && !held; try++ {
			x, err := r.fanout(ctx, t, fmt.Sprintf("ladder%.0f-%d", fps, try), fps, r.plan.ladderDuration)
			if err != nil {
				return res, err
			}
			if held = x.p99 < ladderP99 && x.delivered >= 99.9 && x.failed == 0; held {
				res.held, res.p99 = fps, x.p99
			}
		}
		if !held {
			res.failed = fps
			return res, nil
		}
	}
	return res, nil
}

// ladderP99 is the latency bound of the ladder, ms.
const ladderP99 = 50

func (r *runner) relayCPU() (time.Duration, error) {
	return probe.CPUSum(r.relayPids())
}

// relayPids are the relays' processes.
func (r *runner) relayPids() []int {
	pids := make([]int, len(r.st.Relays))
	for i, rl := range r.st.Relays {
		pids[i] = rl.Pid()
	}
	return pids
}

// churn runs the fixed churn (workers connecting, one round trip, closing)
// against target t and returns its handshakes per second, round-trip p50
// and the target's CPU per handshake, read from /proc around the run.
func (r *runner) churn(ctx context.Context, t *target, rep int) (x churnResult, err error) {
	pids, err := t.pids()
	if err != nil {
		return x, err
	}
	user0, sys0, err := probe.CPUSplitSum(pids)
	if err != nil {
		return x, err
	}
	rp, err := r.load(ctx, fmt.Sprintf("churn-%s-%d", t.name(), rep), "churn", "-url", r.url(t.addr, "churn"),
		"-c", strconv.Itoa(r.plan.churnWorkers), "-duration", r.plan.churnDuration.String())
	if err != nil {
		return x, err
	}
	user1, sys1, err := probe.CPUSplitSum(pids)
	if err != nil {
		return x, err
	}
	if err := loadFailed(rp); err != nil {
		return x, fmt.Errorf("churn %s: %w", t.name(), err)
	}
	n := float64(rp.Connected)
	x = churnResult{hps: rp.HandshakesPerSec, rtt50: rp.RoundTrip.P50,
		cpuPer:    float64((user1 - user0 + sys1 - sys0).Microseconds()) / n,
		kernelPer: float64((sys1 - sys0).Microseconds()) / n}
	r.progress("churn %s: %.0f handshakes/s, round trip p50 %.2fms, %.0f µs CPU per handshake, %.0f of them in the kernel", t.name(), x.hps, x.rtt50, x.cpuPer, x.kernelPer)
	return x, nil
}

// churnResult is what one churn run measured: handshakes per second, the
// round trip's p50 (ms) and the target's CPU per handshake (µs), and of
// that the kernel's (stime).
type churnResult struct{ hps, rtt50, cpuPer, kernelPer float64 }

// drain runs wsload's relay.v1 drain scenario through the gateway: at 2s
// the admin API drains relay 1 with migrate=1 (its tunnels get 1001 spread
// over the drain window) and its clients come back through the gateway to
// the other relay. The node is undrained afterwards for the next run.
func (r *runner) drain(ctx context.Context, rep int) (*loadgen.Report, error) {
	g, node := r.st.Gateways[0], r.st.Relays[0].Addr
	path := "/api/pools/relay/nodes/" + node
	rp, err := r.load(ctx, fmt.Sprintf("drain-through-%d", rep), "drain", "-url", r.url(g.Addr, "drain"),
		"-rooms", "20", "-members", "5", "-rate", "2", "-duration", "8s", "-after", "2s",
		"-drain-url", "http://"+g.Admin+path+"/drain?migrate=1", "-window", "1s", "-give-up", "20s", "-settle", "4s")
	if uerr := g.Post(path + "/undrain"); uerr != nil && err == nil {
		err = uerr
	}
	return rp, err
}

// loadFailed says why a report cannot be used: failed handshakes or nothing
// measured.
func loadFailed(rp *loadgen.Report) error {
	switch {
	case rp.Connected == 0:
		return errors.New("no connection succeeded")
	case rp.Failed > 0:
		return fmt.Errorf("%d failures %v", rp.Failed, rp.FailedBy)
	}
	return nil
}
