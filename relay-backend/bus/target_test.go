package bus

import (
	"errors"
	"testing"
)

// TestSlot checks the hash slots against values Redis's CLUSTER KEYSLOT
// gives, hash tags included.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo":                   12182,
		"somekey":               11058,
		"123456789":             12739, // CRC16/XMODEM check value 0x31C3
		"{foo}bar":              12182,
		"wsgate:room:{foo}":     12182,
		"wsgate:{foo}:log":      12182,
		"{}foo":                 slot("{}foo"), // an empty tag hashes the whole key
		"foo{":                  slot("foo{"),
		"{user1000}.following":  slot("{user1000}.followers"),
		"wsgate:{a}b}:meta":     slot("a"),
		"wsgate:room:{{x}":      slot("{x"),
		"a{b}c{d}":              slot("b"),
		"wsgate:{room-1}:meta:": slot("room-1"),
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if slot("{}foo") == slot("") {
		t.Error("an empty hash tag was used as the tag")
	}
}

func TestChannelName(t *testing.T) {
	for _, sharded := range []bool{false, true} {
		ch := ChannelName("wsgate:room:", "r-1", sharded)
		want := map[bool]string{false: "wsgate:room:r-1", true: "wsgate:room:{r-1}"}[sharded]
		if ch != want {
			t.Errorf("ChannelName(sharded %v) = %q, want %q", sharded, ch, want)
		}
		if room, ok := roomOf("wsgate:room:", ch, sharded); !ok || room != "r-1" {
			t.Errorf("roomOf(%q) = %q, %v", ch, room, ok)
		}
	}
	if _, ok := roomOf("wsgate:room:", "wsgate:room:r-1", true); ok {
		t.Error("a channel without braces was taken for a sharded room")
	}
	if _, ok := roomOf("wsgate:room:", "other:{r}", true); ok {
		t.Error("a channel of another prefix was taken")
	}
}

func TestTargetClient(t *testing.T) {
	for _, bad := range []RedisTarget{
		{},
		{URL: "redis://x:1/0", Cluster: []string{"x:1"}},
		{Cluster: []string{"x:1"}, SentinelMaster: "m", Sentinels: []string{"x:2"}},
		{SentinelMaster: "m"},
		{Sentinels: []string{"x:2"}},
	} {
		if _, err := bad.Client(); !errors.Is(err, ErrNoTarget) {
			t.Errorf("%+v: err %v, want ErrNoTarget", bad, err)
		}
	}
	for _, good := range []RedisTarget{
		{URL: "redis://127.0.0.1:1/0"},
		{Cluster: []string{"127.0.0.1:1"}},
		{SentinelMaster: "m", Sentinels: []string{"127.0.0.1:2"}},
	} {
		c, err := good.Client()
		if err != nil {
			t.Fatalf("%+v: %v", good, err)
		}
		_ = c.Close()
	}
}
