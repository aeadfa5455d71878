// Package admin is the gateway's admin listener: liveness and readiness,
// Prometheus metrics, the JSON API that lists nodes, shows the config
// (secrets redacted), reloads it, revokes credentials and drains nodes,
// and the dashboard page that drives that API from a browser.
//
// Every request but liveness and readiness is checked against DNS
// rebinding (its Host must name this listener) and, when it may change
// state, against cross-site pages; a bearer token, when configured, then
// guards all but the dashboard page. The package reads and steers the
// gateway only through the Gateway interface.
package admin
