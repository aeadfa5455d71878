package loadgen

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// runStorm connects c.N clients, waits c.After, then drops every one
// (client-side close) and has each reconnect after a random delay in
// [0, c.Window), retrying with jittered exponential backoff until c.GiveUp.
func runStorm(ctx context.Context, c *Config, rec *Recorder) error {
	conns := make([]*Conn, c.N)
	rampStart := time.Now()
	ramp(ctx, c.N, c.Rate, func(i int) {
		conns[i] = dialOne(ctx, c, rec, c.roomTarget(i%c.Rooms))
	})
	opened := int64(0)
	for _, conn := range conns {
		if conn != nil {
			opened++
		}
	}
	d := time.Since(rampStart)
	rec.Update(func(r *Report) {
		r.Target, r.Short = int64(c.N), int64(c.N)-opened
		if d > 0 {
			r.HandshakesPerSec = float64(r.Connected) / d.Seconds()
		}
	})
	// Read loops: a drop before the signal is counted as such.
	p := newPool()
	for _, conn := range conns {
		if conn == nil {
			continue
		}
		p.add(conn)
		p.wg.Add(1)
		go readIdle(conn, p, rec)
	}
	progress(c, "connected %d; storm in %v", len(p.snapshot()), c.After)
	if !sleepCtx(ctx, c.After) {
		p.closeAll(time.Second)
		return ctx.Err()
	}
	signal := time.Now()
	victims := p.snapshot()
	p.closeAll(2 * time.Second)

	back := newPool()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var last time.Duration
	for i := range victims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, tries := stormReconnect(ctx, c, rec, i, signal)
			rec.Update(func(r *Report) { r.Tries += int64(tries) })
			if conn == nil {
				rec.Update(func(r *Report) { r.NotBack++ })
				return
			}
			d := time.Since(signal)
			rec.r.Reconnect.Hist.Record(d)
			rec.Update(func(r *Report) { r.Back++ })
			mu.Lock()
			last = max(last, d)
			mu.Unlock()
			back.add(conn)
			back.wg.Add(1)
			go readIdle(conn, back, rec)
		}()
	}
	wg.Wait()
	rec.Update(func(r *Report) { r.BackAllMS = ms(last) })
	back.closeAll(2 * time.Second)
	return nil
}

// stormReconnect brings client i back; it returns the connection (nil when
// it gave up) and the number of tries.
func stormReconnect(ctx context.Context, c *Config, rec *Recorder, i int, signal time.Time) (*Conn, int) {
	rng := rand.New(rand.NewPCG(c.Seed, uint64(i)))
	ctx, cancel := context.WithDeadline(ctx, signal.Add(c.GiveUp))
	defer cancel()
	wait := time.Until(signal.Add(time.Duration(rng.Int64N(int64(c.Window)))))
	backoff := 100 * time.Millisecond
	for try := 1; try <= 1000; try++ {
		if !sleepCtx(ctx, wait) {
			return nil, try - 1
		}
		if conn := dialOne(ctx, c, rec, c.roomTarget(i%c.Rooms)); conn != nil {
			return conn, try
		}
		wait = backoff/2 + time.Duration(rng.Int64N(int64(backoff)))
		backoff = min(2*backoff, 2*time.Second)
	}
	return nil, 1000
}
