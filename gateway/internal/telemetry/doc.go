// Package telemetry is what the gateway tells its operators: the Prometheus
// metrics and the access log.
package telemetry
