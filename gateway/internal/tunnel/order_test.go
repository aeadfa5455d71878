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

// runNodeCloses starts a tunnel whose node echoes three frames, then sends
// its own close 1000 and closes its connection at once, unread bytes and
// all, while the client goes on sending a frame one byte per write. It
// reports what the client read: "ok" for the three echoes and the node's
// close 1000.
func runNodeCloses(t *testing.T) string {
	client, gwClient := tcpPair(t)
	gwNode, node := tcpPair(t)
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
