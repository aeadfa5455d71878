package h2core

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/net/http2"
)

// settingsFrame returns a SETTINGS frame of ss, read back by a Framer.
func settingsFrame(t *testing.T, ss ...http2.Setting) *http2.SettingsFrame {
	t.Helper()
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, &buf)
	if err := fr.WriteSettings(ss...); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	return f.(*http2.SettingsFrame)
}

// TestPeerSettingsBounds: each setting's bounds (RFC 9113 section
// 6.5.2, RFC 8441 section 3) and the error code of a value out of them.
func TestPeerSettingsBounds(t *testing.T) {
	s := func(id http2.SettingID, v uint32) http2.Setting { return http2.Setting{ID: id, Val: v} }
	cases := []struct {
		name     string
		before   []http2.Setting // applied first, without error
		settings []http2.Setting
		fits     bool // whether each window applies without overflow
		code     http2.ErrCode
		want     PeerSettings
		change   SettingsChange
	}{
		{name: "none", fits: true, want: NewPeerSettings()},
		{name: "ENABLE_PUSH 1 is in bounds, and ignored", settings: []http2.Setting{s(http2.SettingEnablePush, 1)}, fits: true, want: NewPeerSettings()},
		{name: "ENABLE_PUSH 2", settings: []http2.Setting{s(http2.SettingEnablePush, 2)}, code: http2.ErrCodeProtocol},
		{name: "INITIAL_WINDOW_SIZE at its largest", settings: []http2.Setting{s(http2.SettingInitialWindowSize, (1<<31 - 1))}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: ^uint32(0), InitialWindowSize: (1<<31 - 1), MaxFrameSize: 16384}},
		{name: "INITIAL_WINDOW_SIZE a stream cannot take", settings: []http2.Setting{s(http2.SettingInitialWindowSize, 70000)}, fits: false, code: http2.ErrCodeFlowControl},
		{name: "INITIAL_WINDOW_SIZE shrinks", settings: []http2.Setting{s(http2.SettingInitialWindowSize, 0)}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: ^uint32(0), InitialWindowSize: 0, MaxFrameSize: 16384}},
		{name: "INITIAL_WINDOW_SIZE up then down", settings: []http2.Setting{s(http2.SettingInitialWindowSize, 1<<20), s(http2.SettingInitialWindowSize, 10)}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: ^uint32(0), InitialWindowSize: 10, MaxFrameSize: 16384}},
		{name: "MAX_FRAME_SIZE below 16384", settings: []http2.Setting{s(http2.SettingMaxFrameSize, 16383)}, code: http2.ErrCodeProtocol},
		{name: "MAX_FRAME_SIZE past 2^24-1", settings: []http2.Setting{s(http2.SettingMaxFrameSize, 1<<24)}, code: http2.ErrCodeProtocol},
		{name: "MAX_FRAME_SIZE at its largest", settings: []http2.Setting{s(http2.SettingMaxFrameSize, 1<<24-1)}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: ^uint32(0), InitialWindowSize: 65535, MaxFrameSize: 1<<24 - 1}},
		{name: "HEADER_TABLE_SIZE, the last wins", settings: []http2.Setting{s(http2.SettingHeaderTableSize, 100), s(http2.SettingHeaderTableSize, 0)}, fits: true,
			want: NewPeerSettings(), change: SettingsChange{TableSize: 0, TableSizeSet: true}},
		{name: "MAX_CONCURRENT_STREAMS and MAX_HEADER_LIST_SIZE", settings: []http2.Setting{s(http2.SettingMaxConcurrentStreams, 0), s(http2.SettingMaxHeaderListSize, 8192)}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: 0, InitialWindowSize: 65535, MaxFrameSize: 16384, MaxHeaderListSize: 8192}},
		{name: "ENABLE_CONNECT_PROTOCOL 2", settings: []http2.Setting{s(http2.SettingEnableConnectProtocol, 2)}, code: http2.ErrCodeProtocol},
		{name: "ENABLE_CONNECT_PROTOCOL withdrawn", before: []http2.Setting{s(http2.SettingEnableConnectProtocol, 1)}, settings: []http2.Setting{s(http2.SettingEnableConnectProtocol, 0)}, code: http2.ErrCodeProtocol},
		{name: "ENABLE_CONNECT_PROTOCOL again", before: []http2.Setting{s(http2.SettingEnableConnectProtocol, 1)}, settings: []http2.Setting{s(http2.SettingEnableConnectProtocol, 1)}, fits: true,
			want: PeerSettings{MaxConcurrentStreams: ^uint32(0), InitialWindowSize: 65535, MaxFrameSize: 16384, EnableConnectProtocol: true}},
		{name: "unknown settings are ignored", settings: []http2.Setting{s(0x99, 12345)}, fits: true, want: NewPeerSettings()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPeerSettings()
			if _, err := p.Apply(settingsFrame(t, tc.before...), nil); err != nil {
				t.Fatal(err)
			}
			asked := 0
			ch, err := p.Apply(settingsFrame(t, tc.settings...), func(uint32) bool { asked++; return !tc.fits })
			if tc.code != 0 {
				var ce ConnError
				if !errors.As(err, &ce) || ce.Code != tc.code {
					t.Fatalf("Apply = %v, want a connection error %v", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply = %v", err)
			}
			if p != tc.want || ch != tc.change {
				t.Fatalf("Apply gave %+v, %+v; want %+v, %+v", p, ch, tc.want, tc.change)
			}
			windows := 0
			for _, st := range tc.settings {
				if st.ID == http2.SettingInitialWindowSize {
					windows++
				}
			}
			if asked != windows {
				t.Fatalf("fits asked %d times, want once for each of the %d windows", asked, windows)
			}
		})
	}
}

// FuzzPeerSettings applies SETTINGS frames of any payload, as the
// Framer reads them, and holds what Apply leaves to the protocol's
// bounds: a value out of them is an error, never applied.
func FuzzPeerSettings(f *testing.F) {
	f.Add([]byte{0, 4, 0, 1, 0, 0}, []byte{0, 5, 0, 0, 0x40, 0})
	f.Add([]byte{0, 8, 0, 0, 0, 1}, []byte{0, 8, 0, 0, 0, 0})
	f.Add([]byte{0, 4, 0x7f, 0xff, 0xff, 0xff}, []byte{0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, first, second []byte) {
		p := NewPeerSettings()
		for _, payload := range [][]byte{first, second} {
			var wire bytes.Buffer
			if err := http2.NewFramer(&wire, nil).WriteRawFrame(http2.FrameSettings, 0, 0, payload); err != nil {
				t.Fatal(err)
			}
			fr, err := http2.NewFramer(nil, &wire).ReadFrame()
			if err != nil {
				return // the Framer refuses it (a length not a multiple of 6, a window past 2^31-1)
			}
			before := p
			_, err = p.Apply(fr.(*http2.SettingsFrame), func(v uint32) bool { return v > 1<<20 })
			var ce ConnError
			if err != nil && !errors.As(err, &ce) {
				t.Fatalf("Apply = %v, not a connection error", err)
			}
			if p.MaxFrameSize < 16384 || p.MaxFrameSize > 1<<24-1 || p.InitialWindowSize < 0 || p.InitialWindowSize > 1<<20 {
				t.Fatalf("applied out of bounds: %+v", p)
			}
			if before.EnableConnectProtocol && !p.EnableConnectProtocol {
				t.Fatalf("extended CONNECT withdrawn without an error: %+v", p)
			}
			if err != nil {
				return
			}
		}
	})
}
