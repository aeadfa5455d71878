package wsframe

import "testing"

func TestOpcode(t *testing.T) {
	tests := []struct {
		op      Opcode
		control bool
		name    string
	}{
		{OpContinuation, false, "continuation"},
		{OpText, false, "text"},
		{OpBinary, false, "binary"},
		{OpClose, true, "close"},
		{OpPing, true, "ping"},
		{OpPong, true, "pong"},
		{0x3, false, "opcode(0x3)"},
		{0x7, false, "opcode(0x7)"},
		{0xB, true, "opcode(0xb)"},
		{0xF, true, "opcode(0xf)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.op.IsControl(); got != tt.control {
				t.Errorf("IsControl() = %v, want %v", got, tt.control)
			}
			if got := tt.op.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
		})
	}
}
