package pluginhost

import "errors"

var (
	// ErrUnavailable is returned by Host.Authenticate when a plugin in the
	// chain cannot decide because it is not running: it crashed and is being
	// restarted, it hung past its timeout, its process could not be reached,
	// or the host is closed. The gateway answers 503 (fail closed). If it
	// persists, read the plugin's log lines; if calls time out, raise the
	// plugin's timeout or fix the plugin.
	ErrUnavailable = errors.New("pluginhost: auth plugin unavailable")
	// ErrUnknownPlugin is returned by Host.Authenticate when a chain names a
	// plugin the host does not run (a config that was not validated).
	ErrUnknownPlugin = errors.New("pluginhost: unknown auth plugin")
	// ErrChecksum is returned by New and Reload when a plugin executable's
	// SHA-256 differs from its configured sha256: the file was replaced or
	// the pin is stale. The plugin is not started.
	ErrChecksum = errors.New("pluginhost: plugin checksum mismatch")
	// ErrBadDecision is returned by Host.Authenticate when a plugin's
	// decision breaks the contract (a header name or value that could
	// inject into the upstream request). The handshake fails closed.
	ErrBadDecision = errors.New("pluginhost: plugin returned a malformed decision")
)
