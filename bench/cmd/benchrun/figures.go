package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/internal/loadgen"
)

// idleResult is what one idle ramp measured.
type idleResult struct {
	perConn     float64 // RSS growth of the measured process per connection, bytes
	loadPerConn float64 // wsload's own RSS per connection, bytes
	connected   int64
	dropped     int64
	split       []int // connections per relay (/info) during the hold, through only
}

// idle ramps r.plan.idleN idle connections to one relay (direct) or the
// gateway and measures the RSS growth of that process, read from
// /proc/PID/status once every connection is open and the counts have
// settled (median of three reads).
func (r *runner) idle(ctx context.Context, through bool) (idleResult, error) {
	var res idleResult
	target, pid, kind := r.st.Relays[0].Addr, r.st.Relays[0].Pid(), "direct"
	if through {
		target, pid, kind = r.st.Gateways[0].Addr, r.st.Gateways[0].Pid(), "through"
	}
	n := r.plan.idleN
	before, err := probe.RSS(pid)
	if err != nil {
		return res, err
	}
	l, err := r.startLoad(ctx, "idle-"+kind, "idle", "-url", r.url(target, "idle"),
		"-n", strconv.Itoa(n), "-rate", "1000", "-hold", "12s", "-threshold", "dropped==0")
	if err != nil {
		return res, err
	}
	count := func() (int, error) {
		if through {
			m, err := r.st.Gateways[0].Metrics()
			if err != nil {
				return 0, err
			}
			v, err := probe.SumCounter(m, "wsgate_tunnels")
			return int(v), err
		}
		info, err := r.st.Relays[0].Info()
		return info.Connections, err
	}
	// Poll until all n are open, bounded by the ramp time plus a margin.
	deadline := time.Now().Add(time.Duration(n)*time.Millisecond + 30*time.Second)
	for got := 0; got < n; {
		select {
		case <-l.done:
			return res, fmt.Errorf("idle %s: wsload ended with %d of %d open", kind, got, n)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("idle %s: %d of %d open after the ramp", kind, got, n)
		}
		got, err = count()
		if err != nil {
			return res, err
		}
	}
	// The last handshakes' garbage and buffers settle for a moment; then
	// three reads half a second apart.
	time.Sleep(2 * time.Second)
	var rss []float64
	for range 3 {
		v, err := probe.RSS(pid)
		if err != nil {
			return res, err
		}
		rss = append(rss, float64(v))
		time.Sleep(500 * time.Millisecond)
	}
	res.perConn = (median(rss) - float64(before)) / float64(n)
	if through {
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
	return res, nil
}

// fanoutResult is what one fanout run measured.
type fanoutResult struct {
	p50, p99     float64 // propagation latency, ms
	delivered    float64 // percent
	frames       float64 // frames the measured process forwarded
	cpu          time.Duration
	cpuPerMframe float64 // CPU seconds per million frames
	relayCPU     time.Duration
}

// fanout runs the fixed fanout (rooms × members, each member sending rate
// messages per second) against one relay (direct) or the gateway. Direct, the CPU is
// both relays' and the frames are wsload's sent plus received messages;
// through, the CPU is the gateway's and the frames its wsgate_frames_total
// delta (both directions).
func (r *runner) fanout(ctx context.Context, through bool, rep, rate int) (fanoutResult, error) {
	var res fanoutResult
	target, kind := r.st.Relays[0].Addr, "direct"
	if through {
		target, kind = r.st.Gateways[0].Addr, "through"
	}
	relayCPU0, err := r.relayCPU()
	if err != nil {
		return res, err
	}
	gwCPU0, gwFrames0, err := r.gatewayCPUFrames()
	if err != nil {
		return res, err
	}
	p := r.plan
	rp, err := r.load(ctx, fmt.Sprintf("fanout%d-%s-%d", rate, kind, rep), "fanout", "-url", r.url(target, "fan"),
		"-rooms", strconv.Itoa(p.fanRooms), "-members", strconv.Itoa(p.fanMembers), "-rate", strconv.Itoa(rate),
		"-size", "64", "-duration", p.fanDuration.String(), "-settle", "2s")
	if err != nil {
		return res, err
	}
	if err := loadFailed(rp); err != nil {
		return res, fmt.Errorf("fanout %s: %w", kind, err)
	}
	relayCPU1, err := r.relayCPU()
	if err != nil {
		return res, err
	}
	gwCPU1, gwFrames1, err := r.gatewayCPUFrames()
	if err != nil {
		return res, err
	}
	res.p50, res.p99, res.delivered = rp.Latency.P50, rp.Latency.P99, rp.Delivered
	res.relayCPU = relayCPU1 - relayCPU0
	if through {
		res.cpu, res.frames = gwCPU1-gwCPU0, gwFrames1-gwFrames0
	} else {
		res.cpu, res.frames = res.relayCPU, float64(rp.Sent+rp.Received)
	}
	r.progress("fanout %d/s %s: %.0f frames (wsload sent+received %d), %v CPU (relays %v), p50 %.2fms p99 %.2fms",
		rate, kind, res.frames, rp.Sent+rp.Received, res.cpu, res.relayCPU, res.p50, res.p99)
	res.cpuPerMframe = math.NaN()
	if res.frames > 0 {
		res.cpuPerMframe = res.cpu.Seconds() / res.frames * 1e6
	}
	return res, nil
}

func (r *runner) relayCPU() (time.Duration, error) {
	var sum time.Duration
	for _, rl := range r.st.Relays {
		c, err := probe.CPU(rl.Pid())
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

func (r *runner) gatewayCPUFrames() (time.Duration, float64, error) {
	g := r.st.Gateways[0]
	c, err := probe.CPU(g.Pid())
	if err != nil {
		return 0, 0, err
	}
	m, err := g.Metrics()
	if err != nil {
		return 0, 0, err
	}
	f, err := probe.SumCounter(m, "wsgate_frames_total")
	return c, f, err
}

// churn runs the fixed churn (workers connecting, one round trip, closing)
// and returns its handshakes per second and round-trip p50 (ms).
func (r *runner) churn(ctx context.Context, through bool, rep int) (hps, rtt50 float64, err error) {
	target, kind := r.st.Relays[0].Addr, "direct"
	if through {
		target, kind = r.st.Gateways[0].Addr, "through"
	}
	rp, err := r.load(ctx, fmt.Sprintf("churn-%s-%d", kind, rep), "churn", "-url", r.url(target, "churn"),
		"-c", "10", "-duration", r.plan.churnDuration.String())
	if err != nil {
		return 0, 0, err
	}
	if err := loadFailed(rp); err != nil {
		return 0, 0, fmt.Errorf("churn %s: %w", kind, err)
	}
	return rp.HandshakesPerSec, rp.RoundTrip.P50, nil
}

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
