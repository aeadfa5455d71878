package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/proxyproto"
)

// Probe I/O bounds.
const (
	maxAnswerBytes = 64 << 10 // status line, headers and the body bytes read
	maxBodyBytes   = 64       // enough to recognise the "draining" body
)

// drainBody is the body of the relay's 503 answer while it drains.
var drainBody = []byte("draining")

// verdict is what one probe says about a node.
type verdict int

const (
	verdictFail  verdict = iota // no answer, or an answer other than 2xx
	verdictPass                 // 2xx and no drain signal
	verdictDrain                // 503 "draining", or the agent said drain
	verdictSkip                 // the dial failed for a local reason: no probe was made
)

// result is the outcome of one probe.
type result struct {
	verdict   verdict
	ok        bool // the node answered 2xx
	answered  bool // an HTTP answer arrived, so agent carries its hint
	agent     agentHint
	malformed []string
	latency   time.Duration
	text      string // for NodeStatus.LastResult
}

// proxyLocal is a PROXY protocol version 2 header with the LOCAL command.
var proxyLocal = proxyproto.AppendLocalV2(nil)

// probe sends one GET of the configured path to addr over a fresh TCP
// connection (TLS with Config.TLS) and reads the answer, all within the timeout; ctx cancels it
// early (Stop, Remove).
//
// The probe is written on a plain connection with net/http's response
// parser rather than through a client with a connection pool: a fresh
// connection per probe exercises the same dial a new tunnel makes (a node
// whose listener stopped accepting fails here, where a kept-alive
// connection would hide it), and no transport goroutine outlives the
// probe, so Stop leaves nothing behind.
func (c *Checker) probe(ctx context.Context, addr string) result {
	start := time.Now()
	r := c.exchange(ctx, addr, start)
	r.latency = time.Since(start)
	return r
}

func (c *Checker) exchange(ctx context.Context, addr string, start time.Time) result {
	ctx, cancel := context.WithDeadline(ctx, start.Add(c.conf().Timeout))
	defer cancel()
	var d net.Dialer
	if r := c.conf().Refuse; r != nil {
		d.Control = func(_, address string, _ syscall.RawConn) error { return r.CheckAddr(address) }
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if reason := LocalReason(err); reason != "" {
			return result{verdict: verdictSkip, text: "not probed: " + reason}
		}
		return failure(err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return failure(err)
	}
	// A cancel before the deadline (Stop) unblocks the read at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := make([]byte, 0, 144)
	if c.conf().ProxyLocal {
		req = append(req, proxyLocal...)
	}
	if t := c.conf().TLS; t != nil {
		// The PROXY header goes before TLS, as on every connection to
		// the node.
		if len(req) > 0 {
			if _, err := conn.Write(req); err != nil {
				return failure(err)
			}
			req = req[:0]
		}
		tc := tls.Client(conn, t.ClientConfig(addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			return failure(err)
		}
		conn = tc
	}
	host := c.conf().Host
	if host == "" {
		host = addr
	}
	req = append(req, "GET "...)
	req = append(req, c.conf().Path...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, host...)
	req = append(req, "\r\nUser-Agent: wsgate-health\r\nAccept: */*\r\nConnection: close\r\n\r\n"...)
	if _, err := conn.Write(req); err != nil {
		return failure(err)
	}
	br := bufio.NewReader(io.LimitReader(conn, maxAnswerBytes))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return failure(err)
	}
	defer resp.Body.Close()

	r := result{answered: true, ok: resp.StatusCode >= 200 && resp.StatusCode < 300}
	r.agent, r.malformed = parseAgent(resp.Header.Get(AgentHeader))
	drainAnswer := false
	if resp.StatusCode == http.StatusServiceUnavailable {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
		drainAnswer = bytes.Equal(bytes.TrimSpace(body), drainBody)
	}
	switch {
	case drainAnswer:
		r.verdict, r.text = verdictDrain, "http 503 draining"
	case r.agent.drain:
		r.verdict, r.text = verdictDrain, "http "+strconv.Itoa(resp.StatusCode)+" agent drain"
	case r.ok:
		r.verdict, r.text = verdictPass, "ok"
	default:
		r.verdict, r.text = verdictFail, "http "+strconv.Itoa(resp.StatusCode)
	}
	return r
}

// failure is the result of a probe that got no usable answer.
func failure(err error) result {
	return result{verdict: verdictFail, text: describe(err)}
}

// describe names a probe error briefly for NodeStatus.LastResult.
func describe(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed without an answer"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	return "error: " + err.Error()
}
