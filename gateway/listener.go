package gateway

import (
	"github.com/wsgate/wsgate/gateway/internal/edge"
	"github.com/wsgate/wsgate/gateway/internal/telemetry"
)

// edgeMetrics counts what the listeners refuse, the accept errors they
// outlive and the loadings of the TLS files after a change.
type edgeMetrics struct{ m *telemetry.Metrics }

// Refused counts a connection refused over limit (edge.Metrics).
func (o edgeMetrics) Refused(limit string) { o.m.Refused.WithLabelValues(limit).Inc() }

// AcceptError counts an accept error the listener outlived (edge.Metrics).
func (o edgeMetrics) AcceptError(errno string) { o.m.AcceptErrors.WithLabelValues(errno).Inc() }

// TLSRecords counts who runs a TLS connection's records after its
// handshake (edge.RecordMetrics).
func (o edgeMetrics) TLSRecords(layer, reason string) {
	o.m.TLSRecords.WithLabelValues(layer, reason).Inc()
}

// TLSReloaded counts a loading of the TLS files, by result
// (edge.ReloadMetrics).
func (o edgeMetrics) TLSReloaded(ok bool) {
	result := "error"
	if ok {
		result = "ok"
	}
	o.m.TLSReloads.WithLabelValues(result).Inc()
}

var (
	_ edge.Metrics       = edgeMetrics{}
	_ edge.ReloadMetrics = edgeMetrics{}
	_ edge.RecordMetrics = edgeMetrics{}
	// The access log writes the lines of the connections the client
	// listeners refuse.
	_ edge.AccessLog = (*telemetry.AccessLog)(nil)
)
