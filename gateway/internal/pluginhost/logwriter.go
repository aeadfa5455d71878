package pluginhost

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// maxLogLine bounds one plugin log line; longer lines are cut.
const maxLogLine = 16 << 10

// logWriter turns a plugin's stderr into slog records, one per line,
// tagged with the plugin's name, without the plugin's own timestamp (see
// parseLogLine). It is safe for concurrent use.
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
	level, msg, fields := parseLogLine(line)
	args := []any{"plugin", w.plugin}
	if len(fields) > 0 {
		args = append(args, slog.Group("fields", fields...))
	}
	w.log.Log(context.Background(), level, msg, args...)
}

// A plugin's line carries its own time, which the gateway's record
// repeats: these match it, so it is dropped.
var (
	// stdlogTime is the log package's date and time (log.LstdFlags,
	// microseconds optional), before a line of the log package or of
	// slog's default logger.
	stdlogTime = regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)? `)
	// hclogText is hclog's text format's time and level:
	// "2026-12-01T15:40:00.123Z [INFO]  ".
	hclogText = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)? +\[(TRACE|DEBUG|INFO|WARN|ERROR)\] +`)
)

// parseLogLine reads one line of a plugin's stderr: an hclog JSON line
// ({"@level":...,"@message":...}, go-plugin's own) gives its level,
// message and other keys (as fields, "@" dropped), without its
// @timestamp; a line of the log package, of slog's default logger or of
// hclog's text format loses its time, and a level after it ("INFO ",
// "[WARN]") becomes the record's level. Any other line is an INFO
// message as it is.
func parseLogLine(line string) (slog.Level, string, []any) {
	if line[0] == '{' {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if msg, ok := m["@message"].(string); ok && msg != "" {
				lvl, _ := m["@level"].(string)
				keys := make([]string, 0, len(m))
				for k := range m {
					if k != "@message" && k != "@level" && k != "@timestamp" {
						keys = append(keys, k)
					}
				}
				sort.Strings(keys)
				fields := make([]any, 0, 2*len(keys))
				for _, k := range keys {
					fields = append(fields, strings.TrimPrefix(k, "@"), m[k])
				}
				return levelOf(lvl), msg, fields
			}
		}
		return slog.LevelInfo, line, nil
	}
	if loc := hclogText.FindStringSubmatchIndex(line); loc != nil {
		return levelOf(strings.ToLower(line[loc[6]:loc[7]])), line[loc[1]:], nil
	}
	if loc := stdlogTime.FindStringIndex(line); loc != nil {
		rest := line[loc[1]:]
		// slog's default logger: "INFO message k=v".
		for _, l := range [...]string{"DEBUG", "INFO", "WARN", "ERROR"} {
			if r, ok := strings.CutPrefix(rest, l+" "); ok {
				return levelOf(strings.ToLower(l)), r, nil
			}
		}
		if rest != "" {
			return slog.LevelInfo, rest, nil
		}
	}
	return slog.LevelInfo, line, nil
}

// levelOf maps an hclog level name to slog's; unknown names are INFO.
func levelOf(name string) slog.Level {
	switch name {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
