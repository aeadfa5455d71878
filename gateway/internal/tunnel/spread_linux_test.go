package tunnel

import (
	"slices"
	"testing"
)

// TestPickPollerBeside pins how a node's HTTP/2 connections are placed
// (AttachConnBeside): each on a poller the node's others are not on while
// there is one, then on the one they are on least, whatever the global
// turn says. Before, each took the next in turn, so a node's connections
// shared a poller whenever another connection or tunnel took a turn
// between them.
func TestPickPollerBeside(t *testing.T) {
	if pickPoller() == nil {
		t.Skip("no event-driven engine")
	}
	n := len(pollers)
	var busy []any
	for i := range 2 * n {
		pickPoller() // another's turn between two of the node's
		p := pickPollerBeside(busy)
		uses := 0
		for _, b := range busy {
			if b == any(p) {
				uses++
			}
		}
		if want := i / n; uses != want {
			t.Fatalf("connection %d on a poller %d of the node's %d connections use, want %d", i, uses, len(busy), want)
		}
		busy = append(busy, p)
	}
	for _, p := range pollers {
		if c := slices.IndexFunc(busy, func(b any) bool { return b == any(p) }); c < 0 {
			t.Fatal("a poller reads none of the node's connections")
		}
	}
}
