package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/probe"
	"github.com/wsgate/wsgate/bench/internal/stack"
)

// meter runs the fan-out through one gateway and reads the counters
// around it.
type meter struct {
	p    plan
	st   *stack.Stack
	rdb  *redis.Client
	bins stack.Binaries
	dir  string
	log  io.Writer
	seq  int
}

// counters are the cumulative figures read before and after a run.
type counters struct {
	publish, commands, netOut float64
	redisCPU, relayCPU        time.Duration
}

func (m *meter) read(ctx context.Context) (counters, error) {
	var c counters
	info, err := m.rdb.Info(ctx, "stats", "commandstats").Result()
	if err != nil {
		return c, fmt.Errorf("redis INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "total_commands_processed":
			c.commands, _ = strconv.ParseFloat(v, 64)
		case "total_net_output_bytes":
			c.netOut, _ = strconv.ParseFloat(v, 64)
		case "cmdstat_publish":
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			c.publish, _ = strconv.ParseFloat(calls, 64)
		}
	}
	if c.redisCPU, err = probe.CPU(m.st.Redis.Pid()); err != nil {
		return c, err
	}
	for _, r := range m.st.Relays {
		cpu, err := probe.CPU(r.Pid())
		if err != nil {
			return c, err
		}
		c.relayCPU += cpu
	}
	return c, nil
}

// measure runs one fan-out through pol's gateway. Every 500ms while it
// runs it reads the relays' /info and, once every member is connected,
// PUBSUB NUMSUB of the run's rooms; the last such sample is kept.
func (m *meter) measure(ctx context.Context, pol policy, rep int) (result, error) {
	var res result
	if err := loadproc.WaitIdle(m.st.Relays, m.dir); err != nil {
		return res, err
	}
	m.seq++
	prefix := fmt.Sprintf("aff%d-%d-r", m.seq, os.Getpid()) // rooms no earlier run used: no history replayed
	p := m.p
	before, err := m.read(ctx)
	if err != nil {
		return res, err
	}
	name := fmt.Sprintf("fanout-%d-%s", rep+1, strings.Fields(pol.name)[0])
	run, err := loadproc.Start(ctx, m.bins.WSLoad, m.dir, name, "fanout",
		"-url", "ws://"+pol.gw.Addr+"/room/"+prefix+"%d",
		"-rooms", strconv.Itoa(p.rooms), "-members", strconv.Itoa(p.members),
		"-rate", strconv.FormatFloat(p.rate, 'f', -1, 64), "-size", strconv.Itoa(p.size),
		"-duration", p.duration.String(), "-settle", "2s")
	if err != nil {
		return res, err
	}
	channels := make([]string, p.rooms)
	for i := range channels {
		channels[i] = channelPrefix + prefix + strconv.Itoa(i)
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-run.Done():
			break sampling
		case <-tick.C:
		}
		if split, ok := m.connected(); ok {
			subs, err := m.rdb.PubSubNumSub(ctx, channels...).Result()
			if err != nil {
				continue
			}
			res.sampled, res.split = true, split
			res.subsMean, res.subsMax, res.single = 0, 0, 0
			for _, ch := range channels {
				n := float64(subs[ch])
				res.subsMean += n / float64(len(channels))
				res.subsMax = max(res.subsMax, n)
				if n == 1 {
					res.single++
				}
			}
		}
	}
	rp, err := run.Wait()
	if err != nil {
		return res, err
	}
	after, err := m.read(ctx)
	if err != nil {
		return res, err
	}
	res.received, res.delivered, res.failed = float64(rp.Received), rp.Delivered, rp.Failed
	res.publish = after.publish - before.publish
	res.commands = after.commands - before.commands
	res.netOut = after.netOut - before.netOut
	res.redisCPU = after.redisCPU - before.redisCPU
	res.relayCPU = after.relayCPU - before.relayCPU
	if !res.sampled {
		return res, fmt.Errorf("%s: never saw all %d members connected (see %s.log)", name, p.rooms*p.members, name)
	}
	fmt.Fprintf(m.log, "affinity: run %d %-18s delivered %.0f frames (%.2f%%, failed %d), PUBLISH %.0f, relays per room %.2f (max %.0f, %.0f rooms on one), relay CPU %v, redis CPU %v, split %v\n",
		rep+1, pol.name, res.received, res.delivered, res.failed, res.publish, res.subsMean, res.subsMax, res.single, res.relayCPU, res.redisCPU, res.split)
	return res, nil
}

// connected returns the relays' connection counts when they add up to
// every member of the run.
func (m *meter) connected() ([]int, bool) {
	split := make([]int, len(m.st.Relays))
	total := 0
	for i, r := range m.st.Relays {
		ri, err := r.Info()
		if err != nil {
			return nil, false
		}
		split[i] = ri.Connections
		total += ri.Connections
	}
	return split, total == m.p.rooms*m.p.members
}
