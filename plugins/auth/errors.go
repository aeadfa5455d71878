package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	// ErrInvalidConfig is wrapped by a plugin's Configure error when its
	// config table is wrong (a missing or unknown key, a bad value). The
	// gateway reports it and does not use the plugin; fix the
	// [plugins.config] table.
	ErrInvalidConfig = errors.New("auth: invalid plugin config")
	// ErrPlugin is wrapped by the gateway-side error when the plugin
	// returned an error instead of a decision (it could not decide, or it
	// broke the contract, say a nil Decision). The handshake fails closed.
	ErrPlugin = errors.New("auth: plugin failed")
	// ErrTransport is wrapped by the gateway-side error when a call did
	// not reach the plugin or its answer was lost: the process exited, or
	// the connection to it broke. The gateway restarts the plugin.
	ErrTransport = errors.New("auth: plugin unreachable")
)

// toStatus turns a plugin's error into the gRPC status that carries it
// over the wire.
func toStatus(err error, configure bool) error {
	if err == nil {
		return nil
	}
	code := codes.Internal
	msg := err.Error()
	switch {
	case configure && errors.Is(err, ErrInvalidConfig):
		// The code says "invalid config"; the message carries only what
		// the plugin adds, so the gateway's side says it once.
		code = codes.InvalidArgument
		msg = detail(msg, ErrInvalidConfig)
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, msg)
}

// detail drops sentinel's text from the front of msg, where a plugin's
// fmt.Errorf("%w: ...", sentinel) puts it.
func detail(msg string, sentinel error) string {
	s := sentinel.Error()
	if msg == s {
		return ""
	}
	return strings.TrimPrefix(msg, s+": ")
}

// wrapDetail is sentinel with msg after it, the sentinel's text said once
// even when msg repeats it (a plugin built with an older SDK sends it).
func wrapDetail(sentinel error, msg string) error {
	if msg = detail(msg, sentinel); msg == "" {
		return sentinel
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}

// fromStatus turns the error of a gRPC call into the contract's errors.
// A caller's own context error is returned as is, so errors.Is(err,
// context.DeadlineExceeded) tells a timeout.
func fromStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %w", ErrTransport, err)
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return wrapDetail(ErrInvalidConfig, st.Message())
	case codes.Unavailable, codes.Canceled:
		// Canceled while the caller's context is live: the connection
		// was closed under the call (the process exited).
		return fmt.Errorf("%w: %s", ErrTransport, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%w: %w: %s", ErrPlugin, context.DeadlineExceeded, st.Message())
	default:
		return wrapDetail(ErrPlugin, st.Message())
	}
}
