package acmecert

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"regexp"

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

// goPointer is a field value that is a Go pointer printed with %p
// (certmagic's "cache" of its maintenance line): an address that means
// nothing to an operator and differs at every start.
var goPointer = regexp.MustCompile(`^0x[0-9a-f]{6,}$`)

// dropField reports whether f says nothing to an operator on a line at
// level: a Go pointer, or, below WARN, an error that a file or key does
// not exist, which is how certmagic learns that a first start has no
// account or certificate yet ("creating new account because no account
// for configured email is known to us" says it already): a reader of
// "error=... no such file or directory" goes looking for a fault.
func dropField(level zapcore.Level, f zapcore.Field) bool {
	switch f.Type {
	case zapcore.StringType:
		return goPointer.MatchString(f.String)
	case zapcore.ErrorType:
		err, ok := f.Interface.(error)
		return ok && level < zapcore.WarnLevel && errors.Is(err, fs.ErrNotExist)
	}
	return false
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, set := range [][]zapcore.Field{c.fields, fields} {
		for _, f := range set {
			if !dropField(e.Level, f) {
				f.AddTo(enc)
			}
		}
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
