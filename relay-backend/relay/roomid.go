package relay

// MaxRoomLen is the longest room id accepted, in bytes.
const MaxRoomLen = 128

// ValidRoom reports whether s is an acceptable room id: 1 to MaxRoomLen
// characters from A-Z, a-z, 0-9 and "._:-".
func ValidRoom(s string) bool {
	if len(s) == 0 || len(s) > MaxRoomLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
