package loadgen

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// Churn message flag: the partner's echo of a round-trip probe.
const flagEcho uint32 = 2

// runChurn runs c.Concurrency workers for c.Duration. Each owns a room and
// a long-lived partner in it that echoes every probe; each iteration
// connects, sends one probe, waits for the echo (a round trip through the
// relay: members receive each other's frames, never their own) and closes.
func runChurn(ctx context.Context, c *Config, rec *Recorder) error {
	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	run := newRunID()
	var wg sync.WaitGroup
	start := time.Now()
	var handshakes sync.Map // worker -> count, summed below
	for w := range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := churnWorker(ctx, c, rec, w, run)
			handshakes.Store(w, n)
		}()
	}
	wg.Wait()
	var total int64
	handshakes.Range(func(_, v any) bool { total += v.(int64); return true })
	d := time.Since(start)
	rec.Update(func(r *Report) {
		// Churn's target is every handshake it tried, its partners'
		// included.
		r.Target, r.Short = r.Attempts, r.Attempts-r.Connected
		if d > 0 {
			r.HandshakesPerSec = float64(total) / d.Seconds()
		}
	})
	return nil
}

// partner is a churn worker's echoing room member.
type partner struct {
	conn *Conn
	done chan struct{}
}

func startPartner(ctx context.Context, c *Config, rec *Recorder, t Target, run uint32) *partner {
	conn := dialOne(ctx, c, rec, t)
	if conn == nil {
		return nil
	}
	p := &partner{conn: conn, done: make(chan struct{})}
	go p.echo(rec, run)
	return p
}

// echo sends every probe of this run back, flagged as an echo.
func (p *partner) echo(rec *Recorder, run uint32) {
	defer close(p.done)
	buf := make([]byte, 0, 64)
	code, _ := p.conn.ReadLoop(func(op wsframe.Opcode, b []byte) {
		m, err := ParseMsg(b)
		if err != nil || m.Run != run || m.Flags&flagEcho != 0 {
			return
		}
		m.Flags |= flagEcho
		buf = AppendMsg(buf[:0], m, len(b))
		_ = p.conn.Write(wsframe.OpBinary, buf)
	})
	if !p.conn.Closing() {
		countDrop(rec, code)
	}
}

func (p *partner) close() {
	p.conn.Close(1000, 2*time.Second)
	<-p.done
}

// churnWorker loops connect, round trip, close until ctx ends and returns
// how many probe connections it opened.
func churnWorker(ctx context.Context, c *Config, rec *Recorder, w int, run uint32) int64 {
	t := c.roomTarget(w)
	sender := uint32(c.Proc)<<20 | uint32(w)
	var p *partner
	defer func() {
		if p != nil {
			p.close()
		}
	}()
	var opened int64
	buf := make([]byte, 0, c.Size)
	for seq := uint64(0); !ended(ctx); seq++ {
		if p == nil || isDone(p.done) {
			if p = startPartner(ctx, c, rec, t, run); p == nil {
				sleepCtx(ctx, 100*time.Millisecond) // back off before the next try
				continue
			}
		}
		conn := dialOne(ctx, c, rec, t)
		if conn == nil {
			continue
		}
		opened++
		got := make(chan struct{})
		ended := make(chan struct{})
		var endCode uint16 // how the probe ended, read once ended is closed
		var endErr error
		go func() {
			defer close(ended)
			var once sync.Once
			endCode, endErr = conn.ReadLoop(func(op wsframe.Opcode, b []byte) {
				m, err := ParseMsg(b)
				if err == nil && m.Run == run && m.Sender == sender && m.Seq == seq && m.Flags&flagEcho != 0 {
					once.Do(func() { close(got) })
				}
			})
		}()
		sent := time.Now()
		buf = AppendMsg(buf[:0], Msg{Run: run, Sender: sender, Seq: seq, SentNS: sent.UnixNano()}, c.Size)
		if err := conn.Write(wsframe.OpBinary, buf); err != nil {
			rec.Update(func(r *Report) { r.FailedBy["write"]++ })
		} else {
			rec.Update(func(r *Report) { r.Sent++ })
			timer := time.NewTimer(c.Dialer.timeout())
			select {
			case <-got:
				rec.r.RoundTrip.Hist.Record(time.Since(sent))
				rec.Update(func(r *Report) { r.Received++; r.Expected++ })
			case <-ended:
				if n := rec.logged.Add(1); n <= 5 {
					progress(c, "probe connection ended before the echo: close %d, %v", endCode, endErr)
				}
				rec.Update(func(r *Report) { r.Expected++; r.FailedBy["rtt_closed"]++ })
			case <-timer.C:
				rec.Update(func(r *Report) { r.Expected++; r.FailedBy["rtt_timeout"]++ })
			case <-ctx.Done():
				// The run ended mid-probe: not counted.
				rec.Update(func(r *Report) { r.Sent-- })
			}
			timer.Stop()
		}
		conn.Close(1000, 2*time.Second)
		<-ended
	}
	return opened
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (d *Dialer) timeout() time.Duration {
	if d.Timeout <= 0 {
		return DefaultTimeout
	}
	return d.Timeout
}
