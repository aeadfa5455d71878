package bus

import "testing"

// TestBackoffWithinDownPoll pins issue 19 item 4: the subscriber's wait
// between receive failures doubled up to 2 s, so a relay came back up to
// 2 s after Redis did (after a Sentinel failover, long enough for a
// resuming reader to fall out of its room's history). However many
// failures in a row, the wait stays within downPoll, the period at which
// a down bus pings anyway.
func TestBackoffWithinDownPoll(t *testing.T) {
	b := minBackoff
	for failures := 1; failures <= 64; failures++ {
		if b > downPoll {
			t.Fatalf("wait after %d failures in a row: %v, want at most %v", failures, b, downPoll)
		}
		b = nextBackoff(b)
	}
	if b != maxBackoff {
		t.Errorf("wait settles at %v, want %v", b, maxBackoff)
	}
	if got := nextBackoff(minBackoff); got != 2*minBackoff || got > downPoll {
		t.Errorf("second wait %v, want %v", got, 2*minBackoff)
	}
}
