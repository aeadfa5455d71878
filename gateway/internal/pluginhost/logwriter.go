package pluginhost

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// maxLogLine bounds one plugin log line; longer lines are cut.
const maxLogLine = 16 << 10

// logWriter turns a plugin's stderr into slog records, one per line,
// tagged with the plugin's name. A go-plugin JSON line ({"@level":...,
// "@message":...}) keeps its level and message. It is safe for concurrent
// use.
type logWriter struct {
	log    *slog.Logger
	plugin string
	mu     sync.Mutex
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLogLine - len(w.buf)
			w.buf = append(w.buf, p[:min(len(p), max(room, 0))]...)
			break
		}
		w.buf = append(w.buf, p[:min(i, max(maxLogLine-len(w.buf), 0))]...)
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

// emit logs the buffered line and empties the buffer.
func (w *logWriter) emit() {
	line := strings.TrimRight(string(w.buf), "\r")
	w.buf = w.buf[:0]
	if line == "" {
		return
	}
	level, msg, raw := slog.LevelInfo, line, ""
	if line[0] == '{' {
		var e struct {
			Level   string `json:"@level"`
			Message string `json:"@message"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Message != "" {
			msg, raw = e.Message, line
			switch e.Level {
			case "trace", "debug":
				level = slog.LevelDebug
			case "warn":
				level = slog.LevelWarn
			case "error":
				level = slog.LevelError
			}
		}
	}
	if raw != "" {
		w.log.Log(context.Background(), level, msg, "plugin", w.plugin, "json", raw)
		return
	}
	w.log.Log(context.Background(), level, msg, "plugin", w.plugin)
}
