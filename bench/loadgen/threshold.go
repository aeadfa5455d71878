package loadgen

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrBadThreshold is returned by ParseThreshold for an expression that is
// not "metric OP value", names no metric of the report, or gives a duration
// for a metric that is not in milliseconds.
var ErrBadThreshold = errors.New("loadgen: bad threshold")

// Threshold is one parsed -threshold expression such as "p95<50ms" or
// "delivered>=99.9". It is a plain value, safe to copy.
type Threshold struct {
	// Expr is the expression as given.
	Expr string
	// Metric is a dotted report key ("p95", "failed_by.http_503").
	Metric string
	// Op is one of < <= > >= == !=.
	Op string
	// Value is the bound, in the metric's unit (milliseconds for latency
	// metrics, whatever duration unit the expression used).
	Value float64
	// Default marks a check of the scenario's target (TargetChecks),
	// not one given with -threshold.
	Default bool
}

// ThresholdResult is a threshold evaluated against a report.
type ThresholdResult struct {
	Expr   string  `json:"expr"`
	Actual float64 `json:"actual"`
	Passed bool    `json:"passed"`
	// Default marks a check of the scenario's target.
	Default bool `json:"default,omitempty"`
}

// targetChecks are the checks of a scenario's target, each with the
// metrics a threshold of the user's may name to replace it.
var targetChecks = []struct {
	expr      string
	scenarios []string // nil: every scenario
	replaced  []string
}{
	{"connected>0", nil, []string{"connected", "short", "failed", "attempts"}},
	{"short==0", nil, []string{"connected", "short", "failed", "attempts"}},
	{"not_back==0", []string{"reconnect-storm", "kill", "drain"}, []string{"back", "not_back"}},
}

// TargetChecks returns the checks of scenario's target that the user's
// thresholds leave in force. A run exits 1 when it misses its target as
// when a threshold fails: when no connection succeeded (connected>0), when
// fewer than its target connected (short==0) and, where clients reconnect
// (reconnect-storm, kill, drain), when one never came back (not_back==0).
// A threshold naming connected, short, failed or attempts replaces the
// first two; one naming back or not_back replaces the third.
func TargetChecks(scenario string, user []Threshold) []Threshold {
	var out []Threshold
	for _, c := range targetChecks {
		if c.scenarios != nil && !slices.Contains(c.scenarios, scenario) {
			continue
		}
		if slices.ContainsFunc(user, func(t Threshold) bool { return slices.Contains(c.replaced, t.Metric) }) {
			continue
		}
		t, err := ParseThreshold(c.expr)
		if err != nil {
			panic(err) // the table above is wrong
		}
		t.Default = true
		out = append(out, t)
	}
	return out
}

// ops in the order they are tried: two-character operators first.
var ops = []string{"<=", ">=", "==", "!=", "<", ">"}

// isMillis reports whether metric is measured in milliseconds.
func isMillis(metric string) bool {
	switch metric {
	case "p50", "p95", "p99", "max", "elapsed_ms", "back_all_ms":
		return true
	}
	return strings.Contains(metric, "_ms.") && !strings.HasSuffix(metric, ".count")
}

// ParseThreshold parses "metric OP value". Spaces around the parts are
// allowed. The value is a number, optionally followed by "%" (ignored: the
// percent metrics are already percentages) or, for millisecond metrics, a
// Go duration unit ("50ms", "1.5s", "800us").
func ParseThreshold(s string) (Threshold, error) {
	t := Threshold{Expr: s}
	i, op := -1, ""
	for _, o := range ops {
		if j := strings.Index(s, o); j >= 0 && (i < 0 || j < i) {
			i, op = j, o
		}
	}
	if i < 0 {
		return t, fmt.Errorf("%w %q: no comparison (one of < <= > >= == !=)", ErrBadThreshold, s)
	}
	t.Op = op
	t.Metric = strings.TrimSpace(s[:i])
	val := strings.TrimSpace(s[i+len(op):])
	if t.Metric == "" || val == "" {
		return t, fmt.Errorf("%w %q: want metric%svalue", ErrBadThreshold, s, op)
	}
	if !KnownMetric(t.Metric) {
		return t, fmt.Errorf("%w %q: unknown metric %q (see docs/wsload.md for the report keys)", ErrBadThreshold, s, t.Metric)
	}
	if strings.ContainsAny(val, "<>=!") {
		return t, fmt.Errorf("%w %q: more than one comparison", ErrBadThreshold, s)
	}
	num := strings.TrimSuffix(val, "%")
	if v, err := strconv.ParseFloat(num, 64); err == nil {
		t.Value = v
	} else if d, derr := time.ParseDuration(val); derr == nil {
		if !isMillis(t.Metric) {
			return t, fmt.Errorf("%w %q: %q is a duration but %s is not a latency", ErrBadThreshold, s, val, t.Metric)
		}
		t.Value = float64(d.Nanoseconds()) / 1e6
	} else {
		return t, fmt.Errorf("%w %q: value %q is neither a number nor a duration", ErrBadThreshold, s, val)
	}
	if t.Value != t.Value { // NaN never compares
		return t, fmt.Errorf("%w %q: value is not a number", ErrBadThreshold, s)
	}
	return t, nil
}

// Check evaluates t against the flattened metrics of a report; a metric
// absent from m (a reason that never happened) reads 0.
func (t Threshold) Check(m map[string]float64) ThresholdResult {
	v := m[t.Metric]
	var ok bool
	switch t.Op {
	case "<":
		ok = v < t.Value
	case "<=":
		ok = v <= t.Value
	case ">":
		ok = v > t.Value
	case ">=":
		ok = v >= t.Value
	case "==":
		ok = v == t.Value
	case "!=":
		ok = v != t.Value
	}
	return ThresholdResult{Expr: t.Expr, Actual: v, Passed: ok, Default: t.Default}
}

// ApplyThresholds evaluates ts against r, stores the results in r and sets
// r.Passed; call it after Finalize.
func (r *Report) ApplyThresholds(ts []Threshold) {
	m := r.Metrics()
	r.Thresholds = r.Thresholds[:0]
	r.Passed = true
	for _, t := range ts {
		res := t.Check(m)
		r.Thresholds = append(r.Thresholds, res)
		r.Passed = r.Passed && res.Passed
	}
}
