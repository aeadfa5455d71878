package h2core

import (
	"errors"
	"fmt"

	"golang.org/x/net/http2"
)

// PeerSettings are the peer's SETTINGS (RFC 9113 section 6.5.2) as they
// stand, those either role acts on. The zero value is not the initial
// one: start from NewPeerSettings. It is not safe for concurrent use:
// the role applies and reads it under one lock.
type PeerSettings struct {
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS: the
	// streams this side may open (no limit until the peer sets one).
	MaxConcurrentStreams uint32
	// InitialWindowSize is SETTINGS_INITIAL_WINDOW_SIZE: every stream's
	// send window is it plus what the stream was credited less what it
	// sent.
	InitialWindowSize int32
	// MaxFrameSize is SETTINGS_MAX_FRAME_SIZE: the largest frame payload
	// this side may send.
	MaxFrameSize uint32
	// MaxHeaderListSize is SETTINGS_MAX_HEADER_LIST_SIZE, 0 while the
	// peer gave none.
	MaxHeaderListSize uint32
	// EnableConnectProtocol is SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441
	// section 3): the peer takes extended CONNECT.
	EnableConnectProtocol bool
}

// NewPeerSettings returns the settings a peer has before its first
// SETTINGS frame.
func NewPeerSettings() PeerSettings {
	return PeerSettings{
		MaxConcurrentStreams: ^uint32(0), // no limit (RFC 9113 section 6.5.2)
		InitialWindowSize:    65535,      // section 6.9.2
		MaxFrameSize:         16384,      // section 4.2
	}
}

// SettingsChange is what one SETTINGS frame changed that the role
// applies beyond PeerSettings and its streams' windows: its hpack
// encoder's table.
type SettingsChange struct {
	// TableSize, when TableSizeSet, is the peer's last
	// SETTINGS_HEADER_TABLE_SIZE: the encoder's dynamic table may use
	// no more (RFC 7541 section 4.2); the size update goes in the next
	// header block.
	TableSize    uint32
	TableSizeSet bool
}

// Apply checks f's settings, in order (RFC 9113 section 6.5.3), and
// applies them. window applies each SETTINGS_INITIAL_WINDOW_SIZE to the
// role's streams (ConnSend.SetPeerWindow: the role knows its streams),
// or reports that a stream's send window would pass 2^31-1 with it
// (section 6.9.2), changing nothing. The error is a ConnError: PROTOCOL_ERROR for a value out
// of its bounds (FLOW_CONTROL_ERROR for a window, FRAME_SIZE_ERROR...
// as section 6.5.2 says) or for an extended CONNECT withdrawn (RFC 8441
// section 3), FLOW_CONTROL_ERROR for a window that overflows. Unknown
// settings are ignored; so are those that limit what neither role does
// (SETTINGS_ENABLE_PUSH, once in bounds: this side never pushes, a
// client never may).
func (p *PeerSettings) Apply(f *http2.SettingsFrame, window func(v uint32) (overflow bool)) (SettingsChange, error) {
	var ch SettingsChange
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			code := http2.ErrCodeProtocol
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			}
			return ConnError{code, fmt.Sprintf("invalid setting %v", s)}
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			ch.TableSize, ch.TableSizeSet = s.Val, true
		case http2.SettingMaxConcurrentStreams:
			p.MaxConcurrentStreams = s.Val
		case http2.SettingInitialWindowSize:
			if window != nil && window(s.Val) {
				return ConnError{http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window"}
			}
			p.InitialWindowSize = int32(s.Val)
		case http2.SettingMaxFrameSize:
			p.MaxFrameSize = s.Val
		case http2.SettingMaxHeaderListSize:
			p.MaxHeaderListSize = s.Val
		case http2.SettingEnableConnectProtocol:
			if p.EnableConnectProtocol && s.Val == 0 {
				return ConnError{http2.ErrCodeProtocol, "SETTINGS_ENABLE_CONNECT_PROTOCOL withdrawn (RFC 8441 section 3)"}
			}
			p.EnableConnectProtocol = s.Val == 1
		}
		return nil
	})
	return ch, err
}
