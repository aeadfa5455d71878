package balancer

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{
		{StateUp, "up"},
		{StateDown, "down"},
		{StateDraining, "draining"},
		{StateDrained, "drained"},
		{StateEjected, "ejected"},
		{State(7), "State(7)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.s.String(); got != tt.want {
				t.Errorf("State(%d).String() = %q, want %q", uint32(tt.s), got, tt.want)
			}
		})
	}
}

func TestNewNodeDefaults(t *testing.T) {
	tests := []struct {
		name               string
		weight, maxConns   int
		wantWeight, wantMC int
	}{
		{"plain", 3, 10, 3, 10},
		{"zero weight becomes 1", 0, 10, 1, 10},
		{"negative weight becomes 1", -5, 10, 1, 10},
		{"zero cap is unlimited", 1, 0, 1, 0},
		{"negative cap is unlimited", 1, -1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode("127.0.0.1:7001", tt.weight, tt.maxConns)
			if n.Addr() != "127.0.0.1:7001" {
				t.Errorf("Addr() = %q", n.Addr())
			}
			if n.Weight() != tt.wantWeight {
				t.Errorf("Weight() = %d, want %d", n.Weight(), tt.wantWeight)
			}
			if n.MaxConns() != tt.wantMC {
				t.Errorf("MaxConns() = %d, want %d", n.MaxConns(), tt.wantMC)
			}
			if n.State() != StateUp || n.Live() != 0 {
				t.Errorf("new node: state %v live %d, want up 0", n.State(), n.Live())
			}
			n.SetWeight(0)
			if n.Weight() != 1 {
				t.Errorf("SetWeight(0) gave weight %d, want 1", n.Weight())
			}
			n.SetMaxConns(-3)
			if n.MaxConns() != 0 {
				t.Errorf("SetMaxConns(-3) gave %d, want 0", n.MaxConns())
			}
		})
	}
}

func TestTryAcquireIgnoresState(t *testing.T) {
	for _, s := range []State{StateUp, StateDown, StateDraining, StateDrained, StateEjected} {
		t.Run(s.String(), func(t *testing.T) {
			n := NewNode("a", 1, 1)
			n.SetState(s)
			l, ok := n.TryAcquire()
			if !ok || l.Node() != n || n.Live() != 1 {
				t.Fatalf("TryAcquire on %v node: ok=%v live=%d", s, ok, n.Live())
			}
			l.Release()
			if n.Live() != 0 {
				t.Fatalf("live %d after release, want 0", n.Live())
			}
		})
	}
}

// TestTryAcquireCapConcurrent runs many goroutines acquiring at once against
// one capped node: the count never exceeds the cap, exactly cap acquires
// succeed while all leases are held, and releasing them all returns the
// count to zero.
func TestTryAcquireCapConcurrent(t *testing.T) {
	tests := []struct {
		name                     string
		goroutines, perG, maxCon int
	}{
		{"cap 1", 8, 20, 1},
		{"cap 37", 8, 50, 37},
		{"cap above demand", 4, 10, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode("a", 1, tt.maxCon)
			var (
				mu     sync.Mutex
				leases []*Lease
				over   atomic.Int64
				wg     sync.WaitGroup
				start  = make(chan struct{})
			)
			for range tt.goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range tt.perG {
						l, ok := n.TryAcquire()
						if live := n.Live(); live > tt.maxCon {
							over.Store(int64(live))
						}
						if ok {
							mu.Lock()
							leases = append(leases, l)
							mu.Unlock()
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if v := over.Load(); v != 0 {
				t.Fatalf("observed live %d above cap %d", v, tt.maxCon)
			}
			want := min(tt.maxCon, tt.goroutines*tt.perG)
			if len(leases) != want || n.Live() != want {
				t.Fatalf("%d leases, live %d; want %d", len(leases), n.Live(), want)
			}
			for _, l := range leases {
				l.Release()
			}
			if n.Live() != 0 {
				t.Fatalf("live %d after releasing all, want 0", n.Live())
			}
		})
	}
}

func TestSetMaxConnsLowerDoesNotEvict(t *testing.T) {
	n := NewNode("a", 1, 5)
	var held []*Lease
	for range 5 {
		l, ok := n.TryAcquire()
		if !ok {
			t.Fatal("acquire under cap failed")
		}
		held = append(held, l)
	}
	n.SetMaxConns(2)
	if n.Live() != 5 {
		t.Fatalf("lowering the cap changed live to %d, want 5", n.Live())
	}
	steps := []struct {
		name    string
		release int // leases to release before trying
		wantOK  bool
	}{
		{"over the new cap", 0, false},
		{"still at 3", 2, false},
		{"at the new cap", 1, false},
		{"under the new cap", 1, true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			for range st.release {
				held[0].Release()
				held = held[1:]
			}
			l, ok := n.TryAcquire()
			if ok != st.wantOK {
				t.Fatalf("TryAcquire ok=%v with live %d and cap 2, want %v", ok, n.Live(), st.wantOK)
			}
			if ok {
				held = append(held, l)
			}
		})
	}
	for _, l := range held {
		l.Release()
	}
	if n.Live() != 0 {
		t.Fatalf("live %d after releasing all, want 0", n.Live())
	}
}

func TestLeaseReleaseIdempotent(t *testing.T) {
	tests := []struct {
		name    string
		callers int
	}{
		{"sequential twice", 0},
		{"concurrent 2", 2},
		{"concurrent 16", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := NewNode("a", 1, 0)
			other, _ := n.TryAcquire() // keeps live at 1 so a double decrement shows
			l, _ := n.TryAcquire()
			if tt.callers == 0 {
				l.Release()
				l.Release()
			} else {
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range tt.callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						l.Release()
					}()
				}
				close(start)
				wg.Wait()
			}
			if n.Live() != 1 {
				t.Fatalf("live %d after releasing one of two leases repeatedly, want 1", n.Live())
			}
			if l.Node() != n {
				t.Fatal("released lease lost its node")
			}
			other.Release()
			if n.Live() != 0 {
				t.Fatalf("live %d, want 0", n.Live())
			}
		})
	}
}

func TestNilLease(t *testing.T) {
	var l *Lease
	l.Release() // must not panic
	if l.Node() != nil {
		t.Fatal("nil lease has a node")
	}
}
