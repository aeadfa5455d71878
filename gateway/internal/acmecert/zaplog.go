package acmecert

import (
	"context"
	"log/slog"

	"go.uber.org/zap/zapcore"
)

// slogCore writes certmagic's zap lines to the gateway's slog logger, at
// Info and above (its Debug lines are per handshake), but for the
// strangerLines.
type slogCore struct {
	log    *slog.Logger
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c slogCore) With(fs []zapcore.Field) zapcore.Core {
	return slogCore{log: c.log, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

// strangerLines are the messages of certmagic's Error lines that anyone
// can have written once per handshake: "tls-alpn challenge" is a
// handshake offering ALPN "acme-tls/1" alone for a name with no challenge
// pending (a CA's validation that comes too late, or a stranger's). They
// are written at Debug, if the gateway logs Debug lines; a validation
// that fails shows as the order's failure anyway.
var strangerLines = map[string]bool{"tls-alpn challenge": true}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if strangerLines[e.Message] {
		if !c.log.Enabled(context.Background(), slog.LevelDebug) {
			return ce
		}
		e.Level = zapcore.DebugLevel
		return ce.AddCore(e, c)
	}
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	level := slog.LevelInfo
	switch {
	case e.Level < zapcore.InfoLevel:
		level = slog.LevelDebug // a stranger's line (see strangerLines)
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level == zapcore.WarnLevel:
		level = slog.LevelWarn
	}
	c.log.LogAttrs(context.Background(), level, e.Message, attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }

var _ zapcore.Core = slogCore{}
