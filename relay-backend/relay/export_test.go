package relay

// AppendForeignEnvelope returns the room log entry another relay would
// append for a message of type typ, as an older relay did without checking
// it, for tests that seed a room's history directly.
func AppendForeignEnvelope(typ int, data []byte) []byte {
	return appendEnvelope(nil, origin{1}, 1, typ, data)
}
