package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Latency is one latency distribution in a Report, in milliseconds.
type Latency struct {
	// Count is the number of observations.
	Count int64 `json:"count"`
	// P50, P95, P99, Max and Mean summarise the observations (ms).
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
	// Hist holds the raw observations. It is encoded only by child
	// processes of -procs, so that the parent can merge exact
	// distributions instead of averaging percentiles.
	Hist *Hist `json:"hist,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// summarise fills the percentiles from l.Hist.
func (l *Latency) summarise() {
	h := l.Hist
	if h == nil {
		return
	}
	l.Count = h.Count()
	l.P50, l.P95, l.P99 = ms(h.Percentile(0.50)), ms(h.Percentile(0.95)), ms(h.Percentile(0.99))
	l.Max, l.Mean = ms(h.Max()), ms(h.Mean())
}

// Counts maps a reason (an HTTP status as "http_503", "dial", "timeout",
// "handshake") or a close code ("1001", "1006") to how often it happened.
type Counts map[string]int64

// Report is everything a scenario measured. Fields that a scenario does not
// measure stay zero. The JSON keys are a stable interface (docs/wsload.md);
// a threshold names one of them, nested keys joined with dots
// ("connect_ms.p95", "failed_by.http_503"). A Report is a plain value: not
// safe for concurrent use; scenarios fill it through a Recorder.
type Report struct {
	Scenario string `json:"scenario"`
	URL      string `json:"url"`
	Procs    int    `json:"procs"`
	// Transport is what carried the WebSockets: "ws" (a TCP connection
	// each), "wss" (a TLS connection each), "wss+h2" (streams of HTTP/2
	// connections over TLS, ALPN h2) or "ws+h2c" (streams of cleartext
	// HTTP/2 connections, prior knowledge).
	Transport string `json:"transport"`
	// Conns counts the TCP connections opened: one per WebSocket, but
	// over HTTP/2 one per -h2-streams WebSockets at most.
	Conns int64 `json:"conns"`
	// TLS counts the TLS handshakes by negotiated version ("1.2",
	// "1.3"), ALPN by the protocol the server chose ("h2", "http/1.1",
	// "none").
	TLS  Counts `json:"tls"`
	ALPN Counts `json:"alpn"`
	// ElapsedMS is the scenario's wall time (ms).
	ElapsedMS float64 `json:"elapsed_ms"`

	// Attempts counts handshakes tried, Connected those answered 101.
	Attempts  int64 `json:"attempts"`
	Connected int64 `json:"connected"`
	// Target is how many connections the scenario set out to open (idle,
	// reconnect-storm: N; fanout, kill, drain: rooms × members; churn:
	// every handshake it tried), Short how many of them never connected.
	// Reconnects are not counted here: NotBack counts the clients that
	// never came back.
	Target   int64  `json:"target"`
	Short    int64  `json:"short"`
	Failed   int64  `json:"failed"`
	FailedBy Counts `json:"failed_by"`
	// Dropped counts connections the server side ended before the client
	// meant to (by close code in DroppedBy; "1006" = no close frame).
	Dropped   int64  `json:"dropped"`
	DroppedBy Counts `json:"dropped_by"`
	// Held counts connections open from their handshake to the end of the
	// hold (idle).
	Held int64 `json:"held"`
	// HandshakesPerSec is Connected divided by the time spent connecting.
	HandshakesPerSec float64 `json:"handshakes_per_sec"`

	Connect   Latency `json:"connect_ms"`
	RoundTrip Latency `json:"rtt_ms"`
	Latency   Latency `json:"latency_ms"`
	Reconnect Latency `json:"reconnect_ms"`

	// Message accounting (fanout, kill, drain, churn).
	Sent      int64   `json:"sent"`
	Expected  int64   `json:"expected"`
	Received  int64   `json:"received"`
	Delivered float64 `json:"delivered"`
	// Duplicates counts a message (sender, sequence) received again by
	// the same receiver, except copies caused by a resend after a
	// reconnect, which DuplicatesResent counts.
	Duplicates       int64 `json:"duplicates"`
	DuplicatesResent int64 `json:"duplicates_resent"`
	OutOfOrder       int64 `json:"out_of_order"`
	Acked            int64 `json:"acked"`
	Resent           int64 `json:"resent"`
	LostWrites       int64 `json:"lost_writes"`
	// Gaps and DupOffsets are relay.v1 offset violations within one
	// connection.
	Gaps       int64 `json:"gaps"`
	DupOffsets int64 `json:"dup_offsets"`
	Resyncs    int64 `json:"resyncs"`

	// CloseCodes counts every close a client saw (kill, drain, storm).
	CloseCodes Counts `json:"close_codes"`

	// Frozen counts the fanout members that connected and then neither
	// read nor sent until the run ended (Config.Frozen). Their handshakes
	// count in Attempts, Connected and Target; the message accounting,
	// the latencies after connect_ms, the drops and the close codes above
	// are the other members' only. Once the others were closed, each frozen socket is read
	// for Config.Settle: FrozenReceived counts the run's messages found
	// in them; FrozenEnded says how each one was found ("open": no close
	// and no end within the read, else the close code that ended it,
	// "1006" for an end without a close frame); FrozenLastSentMS is how
	// long after the senders started the newest message a frozen member
	// got was sent (the latest over them, ms), so a member cut while
	// frozen shows when its deliveries stopped.
	Frozen           int64   `json:"frozen"`
	FrozenReceived   int64   `json:"frozen_received"`
	FrozenEnded      Counts  `json:"frozen_ended"`
	FrozenLastSentMS float64 `json:"frozen_last_sent_ms"`
	// Tries counts reconnect attempts; Back the clients that came back,
	// NotBack those that gave up; BackAllMS the time until the last one
	// was back.
	Tries     int64   `json:"tries"`
	Back      int64   `json:"back"`
	NotBack   int64   `json:"not_back"`
	BackAllMS float64 `json:"back_all_ms"`

	// RSSBytes is the load generator's own resident memory at the end of
	// the hold; RSSPerConnBytes its growth per connection (idle).
	RSSBytes        int64   `json:"rss_bytes"`
	RSSGrowthBytes  int64   `json:"rss_growth_bytes"`
	RSSPerConnBytes float64 `json:"rss_per_conn_bytes"`

	// P50, P95, P99 and Max repeat the scenario's headline latency (ms):
	// fanout, kill, drain: latency_ms; churn: rtt_ms; idle: connect_ms;
	// reconnect-storm: reconnect_ms.
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`

	Thresholds []ThresholdResult `json:"thresholds"`
	Passed     bool              `json:"passed"`
}

// NewReport returns an empty report for scenario with its maps and
// histograms ready.
func NewReport(scenario string) *Report {
	r := &Report{Scenario: scenario, Procs: 1, FailedBy: Counts{}, DroppedBy: Counts{}, CloseCodes: Counts{}, FrozenEnded: Counts{}, TLS: Counts{}, ALPN: Counts{}, Passed: true}
	for _, l := range r.latencies() {
		l.Hist = &Hist{}
	}
	return r
}

func (r *Report) latencies() []*Latency {
	return []*Latency{&r.Connect, &r.RoundTrip, &r.Latency, &r.Reconnect}
}

// headline returns the scenario's main latency.
func (r *Report) headline() *Latency {
	switch r.Scenario {
	case "churn":
		return &r.RoundTrip
	case "idle":
		return &r.Connect
	case "reconnect-storm":
		return &r.Reconnect
	}
	return &r.Latency
}

// Finalize computes the derived fields (percentiles, delivered percent,
// totals of the by-reason counts, headline latency).
func (r *Report) Finalize() {
	for _, l := range r.latencies() {
		l.summarise()
	}
	r.Failed = sum(r.FailedBy)
	r.Dropped = sum(r.DroppedBy)
	r.Delivered = 0
	if r.Expected > 0 {
		r.Delivered = 100 * float64(r.Received) / float64(r.Expected)
	} else if r.Sent == 0 {
		r.Delivered = 100
	}
	if r.Connected > 0 && r.RSSGrowthBytes > 0 {
		r.RSSPerConnBytes = float64(r.RSSGrowthBytes) / float64(r.Connected)
	}
	h := r.headline()
	r.P50, r.P95, r.P99, r.Max = h.P50, h.P95, h.P99, h.Max
}

func sum(c Counts) int64 {
	var n int64
	for _, v := range c {
		n += v
	}
	return n
}

// Merge adds the measurements of o (another process's report of the same
// scenario) to r. Call Finalize afterwards.
func (r *Report) Merge(o *Report) {
	if r.Scenario == "" {
		r.Scenario, r.URL = o.Scenario, o.URL
	}
	if r.Transport == "" {
		r.Transport = o.Transport
	}
	r.Conns += o.Conns
	r.ElapsedMS = max(r.ElapsedMS, o.ElapsedMS)
	r.Attempts += o.Attempts
	r.Connected += o.Connected
	r.Target += o.Target
	r.Short += o.Short
	r.Held += o.Held
	r.HandshakesPerSec += o.HandshakesPerSec
	for _, p := range [][2]*Counts{{&r.FailedBy, &o.FailedBy}, {&r.DroppedBy, &o.DroppedBy}, {&r.CloseCodes, &o.CloseCodes}, {&r.FrozenEnded, &o.FrozenEnded}, {&r.TLS, &o.TLS}, {&r.ALPN, &o.ALPN}} {
		if *p[0] == nil {
			*p[0] = Counts{}
		}
		for k, v := range *p[1] {
			(*p[0])[k] += v
		}
	}
	mine, theirs := r.latencies(), o.latencies()
	for i := range mine {
		if mine[i].Hist == nil {
			mine[i].Hist = &Hist{}
		}
		mine[i].Hist.Merge(theirs[i].Hist)
	}
	r.Sent += o.Sent
	r.Expected += o.Expected
	r.Received += o.Received
	r.Duplicates += o.Duplicates
	r.DuplicatesResent += o.DuplicatesResent
	r.OutOfOrder += o.OutOfOrder
	r.Acked += o.Acked
	r.Resent += o.Resent
	r.LostWrites += o.LostWrites
	r.Gaps += o.Gaps
	r.DupOffsets += o.DupOffsets
	r.Resyncs += o.Resyncs
	r.Tries += o.Tries
	r.Back += o.Back
	r.NotBack += o.NotBack
	r.BackAllMS = max(r.BackAllMS, o.BackAllMS)
	r.RSSBytes += o.RSSBytes
	r.RSSGrowthBytes += o.RSSGrowthBytes
	r.Frozen += o.Frozen
	r.FrozenReceived += o.FrozenReceived
	r.FrozenLastSentMS = max(r.FrozenLastSentMS, o.FrozenLastSentMS)
}

// StripHists drops the raw histograms, for the final JSON a user reads.
func (r *Report) StripHists() {
	for _, l := range r.latencies() {
		l.Hist = nil
	}
}

// Metrics flattens the report's numeric fields into dotted JSON keys
// ("connect_ms.p95", "failed_by.http_503").
func (r *Report) Metrics() map[string]float64 {
	c := *r
	c.Thresholds = nil
	for _, l := range []*Latency{&c.Connect, &c.RoundTrip, &c.Latency, &c.Reconnect} {
		l.Hist = nil
	}
	b, _ := json.Marshal(&c)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	out := map[string]float64{}
	flatten("", m, out)
	return out
}

func flatten(prefix string, m map[string]any, out map[string]float64) {
	for k, v := range m {
		switch v := v.(type) {
		case float64:
			out[prefix+k] = v
		case bool:
			out[prefix+k] = 0
			if v {
				out[prefix+k] = 1
			}
		case map[string]any:
			flatten(prefix+k+".", v, out)
		}
	}
}

// countKeys are the report keys whose members are open-ended (a reason, a
// close code): a threshold may name any member; a missing one reads 0.
var countKeys = []string{"failed_by", "dropped_by", "close_codes", "frozen_ended", "tls", "alpn"}

// KnownMetric reports whether name is a metric a threshold may use.
func KnownMetric(name string) bool {
	if _, ok := NewReport("").Metrics()[name]; ok {
		return true
	}
	for _, k := range countKeys {
		if rest, ok := strings.CutPrefix(name, k+"."); ok && rest != "" {
			return true
		}
	}
	return false
}

// WriteTable writes the human summary of r to w: the non-zero measurements,
// then the thresholds.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "wsload %s\t%s\tprocs %d\telapsed %.1fs\n", r.Scenario, r.URL, r.Procs, r.ElapsedMS/1000)
	row := func(name string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", name, v) }
	if r.Transport != "" {
		row("transport", r.Transport+transportDetail(r))
	}
	ints := []struct {
		name string
		v    int64
	}{
		{"attempts", r.Attempts}, {"connected", r.Connected}, {"conns", r.Conns}, {"target", r.Target}, {"short", r.Short},
		{"failed", r.Failed}, {"dropped", r.Dropped},
		{"held", r.Held}, {"sent", r.Sent}, {"expected", r.Expected}, {"received", r.Received},
		{"duplicates", r.Duplicates}, {"duplicates_resent", r.DuplicatesResent}, {"out_of_order", r.OutOfOrder},
		{"acked", r.Acked}, {"resent", r.Resent}, {"lost_writes", r.LostWrites}, {"gaps", r.Gaps},
		{"dup_offsets", r.DupOffsets}, {"resyncs", r.Resyncs}, {"tries", r.Tries}, {"back", r.Back}, {"not_back", r.NotBack},
		{"frozen", r.Frozen}, {"frozen_received", r.FrozenReceived},
	}
	for _, it := range ints {
		if it.v != 0 || it.name == "connected" || it.name == "failed" || it.name == "short" {
			row(it.name, it.v)
		}
	}
	for _, c := range []struct {
		name string
		m    Counts
	}{{"failed_by", r.FailedBy}, {"dropped_by", r.DroppedBy}, {"close_codes", r.CloseCodes}, {"frozen_ended", r.FrozenEnded}, {"tls", r.TLS}, {"alpn", r.ALPN}} {
		for _, k := range slices.Sorted(maps.Keys(c.m)) {
			row(c.name+"."+k, c.m[k])
		}
	}
	if r.Sent > 0 {
		row("delivered", strconv.FormatFloat(r.Delivered, 'f', 3, 64)+"%")
	}
	if r.HandshakesPerSec > 0 {
		row("handshakes_per_sec", strconv.FormatFloat(r.HandshakesPerSec, 'f', 0, 64))
	}
	if r.BackAllMS > 0 {
		row("back_all_ms", strconv.FormatFloat(r.BackAllMS, 'f', 1, 64))
	}
	if r.Frozen > 0 {
		row("frozen_last_sent_ms", strconv.FormatFloat(r.FrozenLastSentMS, 'f', 1, 64))
	}
	if r.RSSBytes > 0 {
		row("rss_bytes", r.RSSBytes)
	}
	if r.RSSPerConnBytes > 0 {
		row("rss_per_conn_bytes", strconv.FormatFloat(r.RSSPerConnBytes, 'f', 0, 64))
	}
	fmt.Fprintf(tw, "  latency (ms)\tcount\tp50\tp95\tp99\tmax\n")
	for _, l := range []struct {
		name string
		l    *Latency
	}{{"connect_ms", &r.Connect}, {"rtt_ms", &r.RoundTrip}, {"latency_ms", &r.Latency}, {"reconnect_ms", &r.Reconnect}} {
		if l.l.Count > 0 {
			fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\n", l.name, l.l.Count, l.l.P50, l.l.P95, l.l.P99, l.l.Max)
		}
	}
	for _, t := range r.Thresholds {
		verdict := "ok"
		if !t.Passed {
			verdict = "FAILED"
		}
		kind := "threshold"
		if t.Default {
			kind = "target"
		}
		fmt.Fprintf(tw, "  %s %s\t%s (actual %g)\n", kind, t.Expr, verdict, t.Actual)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// transportDetail sums up the TLS versions and ALPN protocols of r's
// handshakes for the table's transport line: " (TLS 1.3, ALPN h2)".
func transportDetail(r *Report) string {
	if len(r.TLS) == 0 {
		return ""
	}
	return " (TLS " + strings.Join(slices.Sorted(maps.Keys(r.TLS)), "+") + ", ALPN " + strings.Join(slices.Sorted(maps.Keys(r.ALPN)), "+") + ")"
}

// Recorder collects a scenario's measurements into a Report from many
// goroutines. It is safe for concurrent use; the histograms are lock-free,
// the counters share one mutex.
type Recorder struct {
	mu     sync.Mutex
	r      *Report
	logged atomic.Int64 // failures logged so far
}

// NewRecorder returns a Recorder filling a fresh report for scenario.
func NewRecorder(scenario string) *Recorder { return &Recorder{r: NewReport(scenario)} }

// Update runs f with the report locked.
func (rc *Recorder) Update(f func(r *Report)) {
	rc.mu.Lock()
	f(rc.r)
	rc.mu.Unlock()
}

// Fail counts a failed handshake under reason.
func (rc *Recorder) Fail(reason string) {
	rc.Update(func(r *Report) { r.Attempts++; r.FailedBy[reason]++ })
}

// Connected counts a successful handshake of conn that took d, and the
// connection it opened for it, if any (its TLS version and ALPN).
func (rc *Recorder) Connected(d time.Duration, conn *Conn) {
	rc.r.Connect.Hist.Record(d)
	rc.Update(func(r *Report) {
		r.Attempts++
		r.Connected++
		if conn == nil || !conn.Fresh {
			return
		}
		r.Conns++
		if t := conn.TLS; t != nil {
			r.TLS[t.Version]++
			alpn := t.ALPN
			if alpn == "" {
				alpn = "none"
			}
			r.ALPN[alpn]++
		}
	})
}

// Report returns the report; call it once the scenario's goroutines are
// done.
func (rc *Recorder) Report() *Report { return rc.r }

// snapshot returns a copy of the counters (maps and histograms shared).
func (rc *Recorder) snapshot() Report {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return *rc.r
}
