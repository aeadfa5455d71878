package acmecert

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// TestStrangerLinesAtDebug pins the level of certmagic's "tls-alpn
// challenge" error, which anyone writes once per handshake offering ALPN
// "acme-tls/1" alone: it was an ERROR line each time. Now it is a Debug
// line, dropped unless the gateway logs Debug; certmagic's other errors
// stay errors.
func TestStrangerLinesAtDebug(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		zl := zap.New(slogCore{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))}).Named("handshake")
		zl.Error("tls-alpn challenge", zap.String("server_name", "a.test"), zap.Error(errors.New("no active ACME challenge")))
		zl.Error("could not get certificate from storage")
		out := buf.String()
		if !strings.Contains(out, `level=ERROR msg="could not get certificate from storage"`) {
			t.Errorf("log at %s: another certmagic error is not an ERROR line:\n%s", level, out)
		}
		stranger := strings.Contains(out, `msg="tls-alpn challenge"`)
		switch {
		case level == slog.LevelInfo && stranger:
			t.Errorf("log at INFO shows the stranger's line:\n%s", out)
		case level == slog.LevelDebug && (!strings.Contains(out, `level=DEBUG msg="tls-alpn challenge"`) || !strings.Contains(out, "server_name=a.test")):
			t.Errorf("log at DEBUG: the stranger's line is not a DEBUG line with its fields:\n%s", out)
		}
	}
}

// TestDroppedFields pins which of certmagic's fields the gateway's log
// leaves out: a Go pointer (its maintenance line's cache=0x...) always,
// and a missing file's error below WARN, where it is how certmagic finds
// that a first start has no account yet; the same error on a WARN or
// ERROR line, and any other error, stay.
func TestDroppedFields(t *testing.T) {
	missing := &fs.PathError{Op: "open", Path: "/acme/users/ops.json", Err: fs.ErrNotExist}
	for _, tc := range []struct {
		name  string
		level zapcore.Level
		field zap.Field
		drop  bool
	}{
		{"pointer", zapcore.InfoLevel, zap.String("cache", "0x1f363743a680"), true},
		{"short hex", zapcore.InfoLevel, zap.String("serial", "0x2d"), false},
		{"string", zapcore.InfoLevel, zap.String("identifier", "a.test"), false},
		{"missing at info", zapcore.InfoLevel, zap.Error(missing), true},
		{"missing wrapped at info", zapcore.InfoLevel, zap.Error(fmt.Errorf("load account: %w", missing)), true},
		{"missing at warn", zapcore.WarnLevel, zap.Error(missing), false},
		{"missing at error", zapcore.ErrorLevel, zap.Error(missing), false},
		{"other error at info", zapcore.InfoLevel, zap.Error(errors.New("connection refused")), false},
	} {
		if got := dropField(tc.level, tc.field); got != tc.drop {
			t.Errorf("%s: dropped %v, want %v", tc.name, got, tc.drop)
		}
	}
}
