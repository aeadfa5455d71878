package loadgen

import (
	"context"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// runIdle ramps to c.N connections at c.Rate per second, holds them for
// c.Hold (pinging every c.Ping if set), and counts what was dropped.
func runIdle(ctx context.Context, c *Config, rec *Recorder) error {
	p := newPool()
	base := rssBytes()
	rampStart := time.Now()
	ramp(ctx, c.N, c.Rate, func(i int) {
		conn := dialOne(ctx, c, rec, c.roomTarget(i%c.Rooms))
		if conn == nil {
			return
		}
		p.add(conn)
		p.wg.Add(1)
		go readIdle(conn, p, rec)
	})
	connected := rec.snapshot().Connected
	d := time.Since(rampStart)
	rec.Update(func(r *Report) {
		r.Target, r.Short = int64(c.N), int64(c.N)-r.Connected
		if d > 0 {
			r.HandshakesPerSec = float64(r.Connected) / d.Seconds()
		}
	})
	progress(c, "ramped %d connections in %v; holding %v", connected, time.Since(rampStart).Round(time.Millisecond), c.Hold)

	holdCtx, cancel := context.WithTimeout(ctx, c.Hold)
	defer cancel()
	if c.Ping > 0 {
		go pingLoop(holdCtx, p, c.Ping)
	}
	<-holdCtx.Done()
	rss := rssBytes()
	open := int64(len(p.snapshot()))
	rec.Update(func(r *Report) {
		r.Held = open
		r.RSSBytes = rss
		r.RSSGrowthBytes = max(rss-base, 0)
	})
	p.closeAll(2 * time.Second)
	return nil
}

// readIdle runs conn's read loop (discarding messages) and counts an early
// end as a drop.
func readIdle(conn *Conn, p *pool, rec *Recorder) {
	defer p.wg.Done()
	code, _ := conn.ReadLoop(func(wsframe.Opcode, []byte) {})
	p.remove(conn)
	if !conn.Closing() {
		countDrop(rec, code)
	}
}

// pingLoop pings every connection of p each interval until ctx ends.
func pingLoop(ctx context.Context, p *pool, interval time.Duration) {
	for sleepCtx(ctx, interval) {
		for _, c := range p.snapshot() {
			_ = c.Ping()
		}
	}
}
