package relayclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/fasthttp/websocket"
)

// ErrOrder is returned by Conn.Next for a MSG whose offset is not above the
// connection's position: a duplicate or a reordering, which relay.v1 rules
// out within an epoch.
var ErrOrder = errors.New("relayclient: message offset not above position")

// ErrNotRelayV1 is returned by Dial when the relay did not select relay.v1.
var ErrNotRelayV1 = errors.New("relayclient: relay did not select " + Subprotocol)

// Conn is one relay.v1 client connection. It tracks the client's position:
// the room's epoch and the offset of the last message received, which is
// what a reconnect passes as since. Like the connection it wraps it has one
// reader (Next) and one writer (Send); Close may be called from any
// goroutine. Position, Live and Acked belong to the reader's goroutine.
type Conn struct {
	ws    *websocket.Conn
	pos   Since
	live  bool
	acked uint64
}

// URL returns u with since set as its since query parameter (u unchanged for
// a zero since).
func URL(u string, since Since) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parse url: %w", err)
	}
	if !since.IsZero() {
		q := pu.Query()
		q.Set("since", since.String())
		pu.RawQuery = q.Encode()
	}
	return pu.String(), nil
}

// Dial connects to a room URL (ws://host/room/id) offering relay.v1,
// resuming at since unless it is zero. d nil means websocket.DefaultDialer.
// The response is returned also on failure, when there was one, so the
// caller can read a refusal's status.
func Dial(ctx context.Context, d *websocket.Dialer, roomURL string, since Since) (*Conn, *http.Response, error) {
	if d == nil {
		d = websocket.DefaultDialer
	}
	u, err := URL(roomURL, since)
	if err != nil {
		return nil, nil, err
	}
	h := http.Header{"Sec-WebSocket-Protocol": {Subprotocol}}
	ws, resp, err := d.DialContext(ctx, u, h)
	if err != nil {
		return nil, resp, fmt.Errorf("dial %s: %w", u, err)
	}
	if ws.Subprotocol() != Subprotocol {
		_ = ws.Close()
		return nil, resp, fmt.Errorf("dial %s: %w (got %q)", u, ErrNotRelayV1, ws.Subprotocol())
	}
	return New(ws, since), resp, nil
}

// New wraps an upgraded relay.v1 connection that asked to resume at since.
func New(ws *websocket.Conn, since Since) *Conn { return &Conn{ws: ws, pos: since} }

// WS returns the wrapped connection, for deadlines and control frames.
func (c *Conn) WS() *websocket.Conn { return c.ws }

// Position returns the epoch and the offset of the last message received;
// after a RESYNC it is the new epoch at offset 0 until messages arrive.
func (c *Conn) Position() Since { return c.pos }

// Live reports whether the replay is over (LIVE was received).
func (c *Conn) Live() bool { return c.live }

// Acked returns the offset of the last ACK received (0 before any).
func (c *Conn) Acked() uint64 { return c.acked }

// Next reads the relay's next frame and updates the position: POS of another
// epoch than the position's resets it to that epoch at offset 0, RESYNC does
// so always (and ends being live, until the next LIVE), MSG advances it, LIVE
// raises it to its offset. A MSG not above the position is returned with
// ErrOrder. The frame's Body is the connection's buffer until the next call.
func (c *Conn) Next() (Frame, error) {
	typ, b, err := c.ws.ReadMessage()
	if err != nil {
		return Frame{}, fmt.Errorf("read frame: %w", err)
	}
	if typ != websocket.BinaryMessage {
		return Frame{}, fmt.Errorf("%w: WebSocket message type %d", ErrBadFrame, typ)
	}
	f, err := ParseFrame(b)
	if err != nil {
		return Frame{}, err
	}
	switch f.Kind {
	case KindPos:
		if string(f.Body) != c.pos.Epoch {
			c.pos = Since{Epoch: string(f.Body)}
		}
	case KindResync:
		c.pos = Since{Epoch: string(f.Body)}
		c.live = false
	case KindMsg:
		if f.Offset <= c.pos.Offset {
			return f, fmt.Errorf("%w: %d after %d", ErrOrder, f.Offset, c.pos.Offset)
		}
		c.pos.Offset = f.Offset
	case KindLive:
		c.live = true
		c.pos.Offset = max(c.pos.Offset, f.Offset)
	case KindAck:
		c.acked = f.Offset
	}
	return f, nil
}

// Send sends one room message of type TypeText or TypeBinary.
func (c *Conn) Send(typ byte, data []byte) error {
	if err := c.ws.WriteMessage(int(typ), data); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// Close closes the connection without a close handshake.
func (c *Conn) Close() error { return c.ws.Close() }
