package loadgen

import (
	"errors"
	"slices"
	"testing"
)

func TestParseThreshold(t *testing.T) {
	tests := []struct {
		in     string
		metric string
		op     string
		value  float64
		bad    bool
	}{
		{in: "p95<50ms", metric: "p95", op: "<", value: 50},
		{in: "p99 <= 1.5s", metric: "p99", op: "<=", value: 1500},
		{in: "latency_ms.max<800us", metric: "latency_ms.max", op: "<", value: 0.8},
		{in: "delivered>=99.9", metric: "delivered", op: ">=", value: 99.9},
		{in: "delivered>=99.9%", metric: "delivered", op: ">=", value: 99.9},
		{in: "dropped==0", metric: "dropped", op: "==", value: 0},
		{in: "failed_by.http_503!=0", metric: "failed_by.http_503", op: "!=", value: 0},
		{in: "close_codes.1001>10", metric: "close_codes.1001", op: ">", value: 10},
		{in: "p95<50", metric: "p95", op: "<", value: 50},
		{in: "nope<1", bad: true},
		{in: "p95", bad: true},
		{in: "<5", bad: true},
		{in: "p95<", bad: true},
		{in: "dropped<5ms", bad: true},
		{in: "connect_ms.count<5ms", bad: true},
		{in: "p95<<5", bad: true},
		{in: "p95<abc", bad: true},
		{in: "p95<NaN", bad: true},
		{in: "failed_by.<1", bad: true},
		{in: "connect_ms.hist<1", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			th, err := ParseThreshold(tt.in)
			if tt.bad {
				if !errors.Is(err, ErrBadThreshold) {
					t.Fatalf("ParseThreshold(%q) = %+v, %v; want ErrBadThreshold", tt.in, th, err)
				}
				return
			}
			if err != nil || th.Metric != tt.metric || th.Op != tt.op || th.Value != tt.value {
				t.Fatalf("ParseThreshold(%q) = %+v, %v; want %s %s %v", tt.in, th, err, tt.metric, tt.op, tt.value)
			}
		})
	}
}

func TestThresholdCheck(t *testing.T) {
	m := map[string]float64{"p95": 40, "delivered": 99.5, "dropped": 0}
	tests := []struct {
		expr string
		pass bool
	}{
		{"p95<50ms", true}, {"p95<40", false}, {"p95<=40", true}, {"p95>40", false}, {"p95>=40", true},
		{"delivered>=99.9", false}, {"dropped==0", true}, {"dropped!=0", false},
		{"failed_by.http_503==0", true}, // absent reads 0
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			th, err := ParseThreshold(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			if res := th.Check(m); res.Passed != tt.pass {
				t.Errorf("%s on %v: passed %v, want %v", tt.expr, m, res.Passed, tt.pass)
			}
		})
	}
}

func TestApplyThresholds(t *testing.T) {
	r := NewReport("fanout")
	r.Sent, r.Expected, r.Received = 10, 10, 9
	r.Finalize()
	var ts []Threshold
	for _, s := range []string{"delivered>=99.9", "sent==10"} {
		th, err := ParseThreshold(s)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, th)
	}
	r.ApplyThresholds(ts)
	if r.Passed || len(r.Thresholds) != 2 || r.Thresholds[0].Passed || !r.Thresholds[1].Passed || r.Thresholds[0].Actual != 90 {
		t.Fatalf("results %+v passed %v", r.Thresholds, r.Passed)
	}
}

func FuzzParseThreshold(f *testing.F) {
	for _, s := range []string{"p95<50ms", "delivered>=99.9", "dropped==0", "failed_by.x!=1", "p99<=1e3", "a<b<c", "", "<", "p95<-1h", "p95<1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		th, err := ParseThreshold(s)
		if err != nil {
			if !errors.Is(err, ErrBadThreshold) {
				t.Fatalf("error %v does not wrap ErrBadThreshold", err)
			}
			return
		}
		if !KnownMetric(th.Metric) || th.Value != th.Value {
			t.Fatalf("accepted %q as %+v", s, th)
		}
		_ = th.Check(map[string]float64{})
	})
}

// TestTargetChecks pins issue 19 item 6: every scenario's target is
// checked unless the user's thresholds name the metrics it is about.
func TestTargetChecks(t *testing.T) {
	exprs := func(scenario string, user ...string) []string {
		var ts []Threshold
		for _, s := range user {
			th, err := ParseThreshold(s)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, th)
		}
		var out []string
		for _, th := range TargetChecks(scenario, ts) {
			if !th.Default {
				t.Errorf("%s: %s not marked Default", scenario, th.Expr)
			}
			out = append(out, th.Expr)
		}
		return out
	}
	tests := []struct {
		scenario string
		user     []string
		want     []string
	}{
		{"idle", nil, []string{"connected>0", "short==0"}},
		{"churn", []string{"p99<1s"}, []string{"connected>0", "short==0"}},
		{"fanout", []string{"failed==0"}, nil},
		{"idle", []string{"connected>=95"}, nil},
		{"idle", []string{"failed_by.http_503<5"}, []string{"connected>0", "short==0"}},
		{"reconnect-storm", nil, []string{"connected>0", "short==0", "not_back==0"}},
		{"kill", []string{"not_back<=3"}, []string{"connected>0", "short==0"}},
		{"drain", []string{"short<=2", "back>=10"}, nil},
	}
	for _, tt := range tests {
		if got := exprs(tt.scenario, tt.user...); !slices.Equal(got, tt.want) {
			t.Errorf("TargetChecks(%s, %q) = %q, want %q", tt.scenario, tt.user, got, tt.want)
		}
	}
	r := NewReport("idle")
	r.Attempts, r.Connected, r.Target, r.Short = 5, 4, 5, 1
	r.Finalize()
	r.ApplyThresholds(TargetChecks("idle", nil))
	if r.Passed || !r.Thresholds[0].Passed || r.Thresholds[1].Passed || r.Thresholds[1].Actual != 1 || !r.Thresholds[1].Default {
		t.Fatalf("one of five short: %+v passed %v", r.Thresholds, r.Passed)
	}
}
