package tunnel

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// echoNode plays a relay node on conn: it echoes every data frame unmasked
// and answers a close frame with a close of the same code, then closes its
// connection, as a node does.
func echoNode(conn net.Conn) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var hb []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			return
		}
		hb = append(hb, b)
		h, _, err := wsframe.ParseHeader(hb)
		if errors.Is(err, wsframe.ErrShortHeader) {
			continue
		}
		if err != nil {
			return
		}
		hb = hb[:0]
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			return
		}
		if h.Masked {
			wsframe.Mask(h.Mask, 0, p)
		}
		if h.Op == wsframe.OpClose {
			code, _, _ := wsframe.ParseClosePayload(p)
			_, _ = conn.Write(wsframe.AppendClose(nil, code, "", nil))
			return
		}
		if _, err := conn.Write(frame(h.Op, h.Fin, false, p)); err != nil {
			return
		}
	}
}

// badFrame is a client frame that breaks the rules, and the close code the
// client must get for it.
type badFrame struct {
	name string
	b    []byte
	code uint16
}

// orderMaxFrame is the route's max_frame in the ordering tests.
const orderMaxFrame = 64

var badFrames = []badFrame{
	{"unmasked", frame(wsframe.OpBinary, true, false, []byte("bad")), CodeProtocolError},
	{"reserved opcode", frame(wsframe.Opcode(0x3), true, true, []byte("bad")), CodeProtocolError},
	{"too large", frame(wsframe.OpBinary, true, true, make([]byte, orderMaxFrame+1)), CodeTooBig},
}

// runBadClient starts a tunnel to an echo node, has the client send three
// valid frames and then bad, in one write or, byteByByte, the bad frame one
// byte per write, and reports what the client read: "ok" for the three
// echoes in order and then the expected close, otherwise what went wrong.
func runBadClient(t *testing.T, bad badFrame, byteByByte bool) string {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	defer client.Close()
	lease := &countingLease{}
	tun := New(Params{
		Client: gwClient, Node: gwNode, Lease: lease,
		MaxFrame: orderMaxFrame, CloseTimeout: 5 * time.Second,
	})
	tun.Start()
	go echoNode(node)

	msgs := []string{"one", "two", "three"}
	var out []byte
	for _, m := range msgs {
		out = append(out, frame(wsframe.OpText, true, true, []byte(m))...)
	}
	_ = client.SetDeadline(time.Now().Add(15 * time.Second))
	if byteByByte {
		if _, err := client.Write(out); err != nil {
			return "write: " + err.Error()
		}
		go func() {
			for i := range bad.b {
				if _, err := client.Write(bad.b[i : i+1]); err != nil {
					return
				}
			}
		}()
	} else if _, err := client.Write(append(out, bad.b...)); err != nil {
		return "write: " + err.Error()
	}

	outcome := ""
	cr := bufio.NewReader(client)
	for echoes := 0; outcome == ""; {
		h, p, err := readFrameErr(cr)
		switch {
		case err != nil:
			outcome = fmt.Sprintf("no close after %d echoes (%v)", echoes, errClass(err))
		case h.Op == wsframe.OpClose:
			code, _, _ := wsframe.ParseClosePayload(p)
			switch {
			case code != bad.code:
				outcome = fmt.Sprintf("close %d after %d echoes", code, echoes)
			case echoes != len(msgs):
				outcome = fmt.Sprintf("close %d after %d echoes", code, echoes)
			default:
				outcome = "ok"
			}
			_, _ = client.Write(wsframe.AppendClose(nil, code, "", &testMask))
		case echoes >= len(msgs) || string(p) != msgs[echoes]:
			outcome = fmt.Sprintf("unexpected frame %q after %d echoes", p, echoes)
		default:
			echoes++
		}
	}
	select {
	case <-tun.Done():
	case <-time.After(15 * time.Second):
		tun.Abort()
		<-tun.Done()
		return outcome + ", tunnel did not end"
	}
	if n := lease.n.Load(); n != 1 {
		return fmt.Sprintf("%s, lease released %d times", outcome, n)
	}
	return outcome
}

// readFrameErr reads one whole frame and returns its header and unmasked
// payload, or the error that stopped it.
func readFrameErr(r *bufio.Reader) (wsframe.Header, []byte, error) {
	var hb []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			return wsframe.Header{}, nil, err
		}
		hb = append(hb, b)
		h, _, err := wsframe.ParseHeader(hb)
		if errors.Is(err, wsframe.ErrShortHeader) {
			continue
		}
		if err != nil {
			return h, nil, err
		}
		p := make([]byte, h.Length)
		if _, err := io.ReadFull(r, p); err != nil {
			return h, nil, err
		}
		if h.Masked {
			wsframe.Mask(h.Mask, 0, p)
		}
		return h, p, nil
	}
}

// errClass names a read error without its addresses, so outcomes count.
func errClass(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		s = s[i+2:]
	}
	return s
}

// countOutcomes runs runBadClient n times, cycling through badFrames, for
// at most budget, and returns the outcomes counted.
func countOutcomes(t *testing.T, n int, budget time.Duration, byteByByte bool) (map[string]int, int) {
	counts := map[string]int{}
	stop := time.Now().Add(budget)
	runs := 0
	for ; runs < n && time.Now().Before(stop); runs++ {
		bad := badFrames[runs%len(badFrames)]
		counts[bad.name+": "+runBadClient(t, bad, byteByByte)]++
	}
	return counts, runs
}

func reportOutcomes(t *testing.T, counts map[string]int, runs, want int) {
	t.Helper()
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	failed := false
	for _, k := range keys {
		t.Logf("%4d  %s", counts[k], k)
		if !strings.HasSuffix(k, ": ok") {
			failed = true
		}
	}
	if runs < want {
		t.Errorf("only %d of %d runs within the time bound", runs, want)
	}
	if failed {
		t.Errorf("some of %d runs did not end as they should", runs)
	}
}

// TestBadClientFrameKeepsEarlierReplies pins the order a client sees when it
// breaks the framing rules: the node's replies to the frames it sent before
// the bad one, then the gateway's 1002 (1009 for a frame over max_frame), as
// a client talking to the node directly would. The gateway used to send its
// close at once and drop the replies still on their way.
func TestBadClientFrameKeepsEarlierReplies(t *testing.T) {
	counts, runs := countOutcomes(t, 100, 60*time.Second, false)
	reportOutcomes(t, counts, runs, 100)
}

// TestBadClientFrameByteByByte is the same with the bad frame sent one byte
// per write while the node answers the earlier ones. Besides the order, it
// pins that the node's close frame, once sent, is never replaced by a 1012
// of the gateway's own.
func TestBadClientFrameByteByByte(t *testing.T) {
	counts, runs := countOutcomes(t, 200, 90*time.Second, true)
	reportOutcomes(t, counts, runs, 200)
}

// runNodeCloses starts a tunnel whose node echoes three frames, then sends
// its own close 1000 and closes its connection at once, unread bytes and
// all, while the client goes on sending a frame one byte per write. It
// reports what the client read: "ok" for the three echoes and the node's
// close 1000.
func runNodeCloses(t *testing.T) string {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	defer client.Close()
	lease := &countingLease{}
	tun := New(Params{Client: gwClient, Node: gwNode, Lease: lease, CloseTimeout: 5 * time.Second})
	tun.Start()
	msgs := []string{"one", "two", "three"}
	go func() {
		defer node.Close()
		_ = node.SetDeadline(time.Now().Add(15 * time.Second))
		nr := bufio.NewReader(node)
		for range msgs {
			h, p, err := readFrameErr(nr)
			if err != nil {
				return
			}
			if _, err := node.Write(frame(h.Op, true, false, p)); err != nil {
				return
			}
		}
		_, _ = node.Write(wsframe.AppendClose(nil, 1000, "node done", nil))
	}()

	_ = client.SetDeadline(time.Now().Add(15 * time.Second))
	for _, m := range msgs {
		if _, err := client.Write(frame(wsframe.OpText, true, true, []byte(m))); err != nil {
			return "write: " + err.Error()
		}
	}
	trickle := frame(wsframe.OpBinary, true, true, make([]byte, 2000))
	stop := make(chan struct{})
	go func() {
		for i := range trickle {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := client.Write(trickle[i : i+1]); err != nil {
				return
			}
		}
	}()
	outcome := ""
	cr := bufio.NewReader(client)
	for echoes := 0; outcome == ""; {
		h, p, err := readFrameErr(cr)
		switch {
		case err != nil:
			outcome = fmt.Sprintf("no close after %d echoes (%v)", echoes, errClass(err))
			close(stop)
		case h.Op == wsframe.OpClose:
			code, _, _ := wsframe.ParseClosePayload(p)
			outcome = fmt.Sprintf("close %d after %d echoes", code, echoes)
			if code == 1000 && echoes == len(msgs) {
				outcome = "ok"
			}
			close(stop)
		case echoes >= len(msgs) || string(p) != msgs[echoes]:
			outcome = fmt.Sprintf("unexpected frame %q after %d echoes", p, echoes)
		default:
			echoes++
		}
	}
	// The trickle may stop inside its frame: the client hangs up rather
	// than answer the close.
	_ = client.Close()
	select {
	case <-tun.Done():
	case <-time.After(15 * time.Second):
		tun.Abort()
		<-tun.Done()
		return outcome + ", tunnel did not end"
	}
	return outcome
}

// TestNodeCloseNeverReplacedBy1012 pins the loss of a node's close frame: a
// write to the node that failed because the node had closed closed the
// node's connection too, before the close frame the node had sent was read,
// so the client got the gateway's 1012 instead of the node's close.
func TestNodeCloseNeverReplacedBy1012(t *testing.T) {
	const want = 200
	counts := map[string]int{}
	stop := time.Now().Add(90 * time.Second)
	runs := 0
	for ; runs < want && time.Now().Before(stop); runs++ {
		counts["node closes: "+runNodeCloses(t)]++
	}
	reportOutcomes(t, counts, runs, want)
}

// TestBadClientFrameSilentNode pins the bound on the wait for the node's
// replies: a node that never answers the gateway's close still leaves the
// client with its 1002 once the close timeout passes, not a 1012.
func TestBadClientFrameSilentNode(t *testing.T) {
	client, gwClient := clientPair(t)
	gwNode, node := nodePair(t)
	lease := &countingLease{}
	tun := New(Params{Client: gwClient, Node: gwNode, Lease: lease, CloseTimeout: 300 * time.Millisecond})
	tun.Start()
	if _, err := client.Write(frame(wsframe.OpText, true, false, []byte("unmasked"))); err != nil {
		t.Fatal(err)
	}
	expectClose(t, node, bufio.NewReader(node), CodeGoingAway, true)
	expectClose(t, client, bufio.NewReader(client), CodeProtocolError, false)
	<-tun.Done()
	if lease.n.Load() != 1 {
		t.Fatal("lease not released once")
	}
}

// TestBytesAfterClientCloseIgnored pins what follows a client's close
// frame: nothing, for a node that stops reading there, so bytes after it
// that break the rules used to earn the client a 1002 in place of the
// node's answer to its close.
func TestBytesAfterClientCloseIgnored(t *testing.T) {
	r := newRig(t, 0)
	b := wsframe.AppendClose(nil, 1000, "bye", &testMask)
	b = append(b, frame(wsframe.OpText, true, false, []byte("unmasked"))...)
	r.write(r.client, b)
	expectClose(t, r.node, r.nr, 1000, true)
	r.write(r.node, wsframe.AppendClose(nil, 1000, "bye", nil))
	expectClose(t, r.client, r.cr, 1000, false)
	r.waitEnd()
}
