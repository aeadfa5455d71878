// Package wsframe encodes and decodes RFC 6455 WebSocket frame headers and
// follows frame boundaries in a byte stream without copying or unmasking
// payloads.
//
// The gateway's tunnel uses a [Scanner] per direction so that it always knows
// where a frame ends and can place its own control frames (close 1001, ping)
// between two frames, never inside one. The load generator reuses the codec
// ([AppendHeader], [ParseHeader], [Mask], [AppendClose]).
//
// Everything here is pure computation: no I/O, no goroutines, and no heap
// allocation on the hot paths ([Scanner.Advance], [ParseHeader],
// [AppendHeader] into a buffer with room, [Mask]).
package wsframe
