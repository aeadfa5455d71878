package acmecert

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
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
