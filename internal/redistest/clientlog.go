package redistest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// go-redis logs to the process's standard error on its own (a dial to a
// server a test has stopped: "redis: ... connection refused"), which a
// passing test would print to whoever reads its output. QuietClients
// sends those lines to clientLog instead, and a test that fails gets the
// ones logged while it ran.

// maxClientLines bounds what clientLog keeps.
const maxClientLines = 200

// clientLog is the go-redis logger of a test binary that called
// QuietClients: it keeps the last maxClientLines lines. It is safe for
// concurrent use.
type clientLog struct {
	mu    sync.Mutex
	lines []string
	n     int // lines logged in all
}

var (
	clients     clientLog
	quietClient sync.Once
	watched     sync.Map // testing.TB -> struct{}: the tests QuietClients reports to
)

// Printf keeps one line of go-redis's.
func (l *clientLog) Printf(_ context.Context, format string, v ...any) {
	line := strings.TrimRight(fmt.Sprintf(format, v...), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == maxClientLines {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, line)
	l.n++
}

// mark is the count of lines logged so far.
func (l *clientLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// since returns the lines logged after mark m that are still kept.
func (l *clientLog) since(m int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := len(l.lines) - min(l.n-m, len(l.lines))
	return append([]string(nil), l.lines[kept:]...)
}

// QuietClients keeps what go-redis logs off the test binary's output
// (redis.SetLogger, for the whole binary, from its first call on): the
// lines logged while tb runs are printed with tb's log if it fails. Start
// and StartArgs call it; a test whose clients talk to no server of this
// package's calls it itself.
func QuietClients(tb testing.TB) {
	quietClient.Do(func() { redis.SetLogger(&clients) })
	if _, dup := watched.LoadOrStore(tb, struct{}{}); dup {
		return // the lines are printed once (a cluster's six servers)
	}
	m := clients.mark()
	tb.Cleanup(func() {
		watched.Delete(tb)
		if !tb.Failed() {
			return
		}
		if lines := clients.since(m); len(lines) > 0 {
			tb.Logf("--- go-redis logged while the test ran (tests running alongside included):\n%s", strings.Join(lines, "\n"))
		}
	})
}
