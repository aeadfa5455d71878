package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/bench/internal/loadproc"
	"github.com/wsgate/wsgate/bench/internal/stack"
)

// spread is what one run of a case measured.
type spread struct {
	samples int     // samples counted (see measure)
	beyond  int     // counted samples beyond ±10%
	maxDev  float64 // largest deviation of a counted sample
	medDev  float64 // median deviation of the counted samples
	worst   []int   // the split of the sample with maxDev
	lo, hi  int     // smallest and largest total of the counted samples
	failed  int64   // failed handshakes of both sources
	drops   int64   // connections the server side ended
}

// meter runs the cases on one stack.
type meter struct {
	st   *stack.Stack
	bins stack.Binaries
	dir  string
	log  io.Writer
	seq  int
}

// sample is the relays' connection counts at one instant.
type sample struct {
	split []int
	total int
	both  bool // both sources were running
}

// measure runs sc's two sources at once, each through its own gateway,
// and samples the relays every 500ms until both are done. Counted are the
// samples taken while both sources ran and the relays held at least half
// of the largest total seen: a ramp's first few connections are not a
// split.
func (m *meter) measure(ctx context.Context, sc scenario, rep int) (spread, error) {
	var sp spread
	m.seq++
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running = 2
		errs    []error
		failed  int64
		drops   int64
	)
	for i, src := range []source{sc.a, sc.b} {
		gw := m.st.Gateways[i]
		if sc.oneGateway {
			gw = m.st.Gateways[0]
		}
		url := fmt.Sprintf("ws://%s/room/tg%d-%d-%c-r%%d", gw.Addr, m.seq, os.Getpid(), 'a'+i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range src.runs {
				name := fmt.Sprintf("%s-%d-gw%d-%d", strings.ReplaceAll(strings.ReplaceAll(sc.name, " ", ""), "+", "-"), rep+1, i+1, k+1)
				r, err := loadproc.Start(ctx, m.bins.WSLoad, m.dir, name, append([]string{src.args[0], "-url", url}, src.args[1:]...)...)
				if err == nil {
					rp, werr := r.Wait()
					err = werr
					if rp != nil {
						mu.Lock()
						failed += rp.Failed
						drops += rp.Dropped
						mu.Unlock()
					}
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					break
				}
			}
			mu.Lock()
			running--
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	var samples []sample
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var killed, back bool
	var countFrom time.Time // samples before it are not counted
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
		}
		if sc.restart {
			var err error
			if killed, back, err = m.restart(time.Since(start), killed, back); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				<-done // the sources end on their own
				break loop
			}
			if back && countFrom.IsZero() && m.upEverywhere(sc) {
				countFrom = time.Now()
				fmt.Fprintf(m.log, "twogw: %s up in the gateways at %v\n", m.st.Relays[0].Name, time.Since(start).Round(100*time.Millisecond))
			}
			if countFrom.IsZero() {
				continue
			}
		}
		mu.Lock()
		both := running == 2
		mu.Unlock()
		if s, ok := m.read(both); ok {
			samples = append(samples, s)
		}
	}
	mu.Lock()
	err := errors.Join(errs...)
	mu.Unlock()
	if err != nil {
		return sp, err
	}
	peak := 0
	for _, s := range samples {
		peak = max(peak, s.total)
	}
	var devs []float64
	sp.lo = peak
	for _, s := range samples {
		if !s.both || 2*s.total < peak || s.total == 0 {
			continue
		}
		d := loadproc.MaxDeviation(s.split)
		devs = append(devs, d)
		if d > 0.10 {
			sp.beyond++
		}
		sp.lo, sp.hi = min(sp.lo, s.total), max(sp.hi, s.total)
		if d >= sp.maxDev {
			sp.maxDev, sp.worst = d, slices.Clone(s.split)
		}
	}
	sp.samples, sp.medDev, sp.failed, sp.drops = len(devs), loadproc.Median(devs), failed, drops
	if sp.samples == 0 {
		return sp, fmt.Errorf("%s run %d: no sample while both sources ran (logs in %s)", sc.name, rep+1, m.dir)
	}
	fmt.Fprintf(m.log, "twogw: %s run %d: %d samples (%d beyond ±10%%), totals %d-%d, max deviation %.1f%% (split %v), median %.1f%%, failed %d, dropped %d\n",
		sc.name, rep+1, sp.samples, sp.beyond, sp.lo, sp.hi, 100*sp.maxDev, sp.worst, 100*sp.medDev, failed, drops)
	return sp, loadproc.WaitIdle(m.st.Relays, m.dir)
}

// restart kills relay 1 at 3s into a case and starts it again on its
// address at 4s; it returns the new state.
func (m *meter) restart(elapsed time.Duration, killed, back bool) (bool, bool, error) {
	r := m.st.Relays[0]
	switch {
	case !killed && elapsed >= 3*time.Second:
		if err := r.Signal(syscall.SIGKILL); err != nil {
			return killed, back, err
		}
		if _, err := r.Wait(10 * time.Second); err != nil {
			return killed, back, err
		}
		fmt.Fprintf(m.log, "twogw: killed %s at %v\n", r.Name, elapsed.Round(100*time.Millisecond))
		return true, false, nil
	case killed && !back && elapsed >= 4*time.Second:
		if _, err := m.st.StartRelay(r.Name, r.Addr); err != nil {
			return killed, back, err
		}
		fmt.Fprintf(m.log, "twogw: %s back at %v\n", r.Name, elapsed.Round(100*time.Millisecond))
		return true, true, nil
	}
	return killed, back, nil
}

// upEverywhere reports whether every gateway sc uses has relay 1 up in
// its /api/nodes (a killed node is ejected for pools.health.eject_for,
// 10s by default, before probes bring it back).
func (m *meter) upEverywhere(sc scenario) bool {
	gws := m.st.Gateways
	if sc.oneGateway {
		gws = gws[:1]
	}
	for _, g := range gws {
		if nodeState(g.Admin, m.st.Relays[0].Addr) != "up" {
			return false
		}
	}
	return true
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// nodeState is node addr's state in the /api/nodes of the gateway whose
// admin listener is admin, "" when unknown.
func nodeState(admin, addr string) string {
	resp, err := httpClient.Get("http://" + admin + "/api/nodes")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Pools []struct {
			Nodes []struct {
				Addr  string `json:"addr"`
				State string `json:"state"`
			} `json:"nodes"`
		} `json:"pools"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return ""
	}
	for _, p := range v.Pools {
		for _, n := range p.Nodes {
			if n.Addr == addr {
				return n.State
			}
		}
	}
	return ""
}

// read reads every relay's /info at once (one goroutine each, so that a
// mass close or open between the reads skews the split as little as it
// can; the reads are still not one instant).
func (m *meter) read(both bool) (sample, bool) {
	s := sample{split: make([]int, len(m.st.Relays)), both: both}
	errs := make([]error, len(m.st.Relays))
	var wg sync.WaitGroup
	for j, r := range m.st.Relays {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ri, err := r.Info()
			s.split[j], errs[j] = ri.Connections, err
		}()
	}
	wg.Wait()
	for j := range s.split {
		if errs[j] != nil {
			return s, false
		}
		s.total += s.split[j]
	}
	return s, true
}
