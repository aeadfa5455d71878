package conf

import (
	"strconv"
	"strings"
)

// The TOML library keeps key positions private and does not tell apart the
// entries of an array of tables, so conf finds the line of a key path such as
// "pools[0].nodes[1].max_conns" with its own light scanner. It understands
// just enough TOML to follow keys: comments, strings (basic, literal,
// multi-line), [table] and [[array]] headers, dotted and quoted keys, arrays
// and inline tables. It never fails: on input it does not understand it
// skips to the next line. Parse only runs it on input the library accepted.

// maxScanDepth bounds the nesting of arrays and inline tables the scanner
// follows, so that hostile input cannot exhaust the stack.
const maxScanDepth = 64

// lineIndex maps key paths to the 1-based line where each was first seen.
// It is immutable once built and safe for concurrent reads.
type lineIndex struct {
	lines map[string]int
}

// indexLines scans src and records the line of every key, table header and
// array element it finds.
func indexLines(src []byte) *lineIndex {
	s := &scanner{src: src, line: 1, lines: make(map[string]int), arrays: make(map[string]int)}
	s.run()
	return &lineIndex{lines: s.lines}
}

// Line returns the line of path, or of its longest recorded prefix when the
// path itself was not recorded (a key inside a one-line inline table, say).
// It returns 0 when nothing matches. A nil index knows no lines.
func (x *lineIndex) Line(path string) int {
	if x == nil {
		return 0
	}
	for path != "" {
		if n, ok := x.lines[path]; ok {
			return n
		}
		path = parentPath(path)
	}
	return 0
}

// parentPath drops the last segment (".key" or "[i]") of a key path,
// ignoring separators inside quoted segments.
func parentPath(path string) string {
	cut, quoted := 0, false
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && (c == '.' || c == '['):
			cut = i
		}
	}
	return path[:cut]
}

// keySegment renders one key segment as it appears in a key path: bare when
// TOML allows it bare, quoted otherwise.
func keySegment(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(k)
		}
	}
	return k
}

// joinKey appends key segment k to path.
func joinKey(path, k string) string {
	if path == "" {
		return keySegment(k)
	}
	return path + "." + keySegment(k)
}

// indexKey appends array index i to path.
func indexKey(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// scanner walks TOML source by hand. Every loop advances pos or returns.
type scanner struct {
	src    []byte
	pos    int
	line   int
	depth  int
	lines  map[string]int // path -> first line
	arrays map[string]int // array-of-tables path -> entries seen so far
}

func (s *scanner) peek(off int) byte {
	if s.pos+off < len(s.src) {
		return s.src[s.pos+off]
	}
	return 0
}

func (s *scanner) record(path string, line int) {
	if _, ok := s.lines[path]; !ok && path != "" {
		s.lines[path] = line
	}
}

// run reads statements until the end of the input.
func (s *scanner) run() {
	table := ""
	for s.pos < len(s.src) {
		start := s.pos
		s.skipBlank(true)
		if s.pos >= len(s.src) {
			return
		}
		line := s.line
		if s.src[s.pos] == '[' {
			array := s.peek(1) == '['
			term := "]"
			if array {
				term = "]]"
			}
			s.pos += len(term)
			if segs, ok := s.readKey(term); ok {
				table = s.header(segs, array, line)
			}
		} else if segs, ok := s.readKey("="); ok {
			path := table
			for _, k := range segs {
				path = joinKey(path, k)
				s.record(path, line)
			}
			s.value(path)
		}
		s.skipLine()
		if s.pos == start { // cannot happen, but never spin
			s.pos++
		}
	}
}

// header resolves a table header to its indexed path: each segment that
// names an array of tables refers to its latest entry, and a [[header]]
// starts a new entry.
func (s *scanner) header(segs []string, array bool, line int) string {
	path := ""
	for i, k := range segs {
		path = joinKey(path, k)
		n, isArray := s.arrays[path]
		switch {
		case array && i == len(segs)-1:
			s.arrays[path] = n + 1
			s.record(path, line)
			path = indexKey(path, n)
		case isArray && n > 0:
			path = indexKey(path, n-1)
		}
		s.record(path, line)
	}
	return path
}

// skipBlank skips spaces, tabs, comments and, if newlines is set, line ends.
func (s *scanner) skipBlank(newlines bool) {
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\r':
			s.pos++
		case '\n':
			if !newlines {
				return
			}
			s.pos++
			s.line++
		case '#':
			for s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
		default:
			return
		}
	}
}

// skipLine moves past the end of the current line.
func (s *scanner) skipLine() {
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		s.pos++
		if c == '\n' {
			s.line++
			return
		}
	}
}

// readKey reads a dotted key up to and including term, on one line.
func (s *scanner) readKey(term string) ([]string, bool) {
	var segs []string
	for range len(s.src) - s.pos + 1 {
		s.skipBlank(false)
		if s.pos >= len(s.src) {
			return nil, false
		}
		var k string
		switch c := s.src[s.pos]; c {
		case '"', '\'':
			var ok bool
			if k, ok = s.readString(); !ok {
				return nil, false
			}
		default:
			start := s.pos
			for s.pos < len(s.src) && isBareKeyByte(s.src[s.pos]) {
				s.pos++
			}
			if s.pos == start {
				return nil, false
			}
			k = string(s.src[start:s.pos])
		}
		segs = append(segs, k)
		s.skipBlank(false)
		switch {
		case s.peek(0) == '.':
			s.pos++
		case strings.HasPrefix(string(s.src[s.pos:min(len(s.src), s.pos+len(term))]), term):
			s.pos += len(term)
			return segs, true
		default:
			return nil, false
		}
	}
	return nil, false
}

func isBareKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c >= 0x80
}

// readString reads a basic, literal or multi-line string at pos and returns
// its content (escapes decoded where Go agrees with TOML).
func (s *scanner) readString() (string, bool) {
	q := s.src[s.pos]
	multi := s.peek(1) == q && s.peek(2) == q
	n := 1
	if multi {
		n = 3
	}
	s.pos += n
	start := s.pos
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case c == '\\' && q == '"':
			s.pos += 2
			continue
		case c == '\n':
			if !multi {
				return "", false
			}
			s.line++
		case c == q && (!multi || s.peek(1) == q && s.peek(2) == q):
			end := s.pos
			if multi {
				// A multi-line string may end with up to two extra quotes
				// that belong to its content.
				run := 3
				for run < 5 && s.peek(run) == q {
					run++
				}
				end = s.pos + run - 3
				s.pos = end
			}
			raw := string(s.src[start:end])
			s.pos += n
			if q == '"' && !multi {
				if v, err := strconv.Unquote(`"` + raw + `"`); err == nil {
					return v, true
				}
			}
			return raw, true
		}
		s.pos++
	}
	return "", false
}

// value reads one value at pos, recording the paths of array elements and
// inline-table keys under path.
func (s *scanner) value(path string) {
	s.skipBlank(false)
	if s.pos >= len(s.src) {
		return
	}
	switch s.src[s.pos] {
	case '"', '\'':
		s.readString()
	case '[':
		s.nested(path, s.array)
	case '{':
		s.nested(path, s.inlineTable)
	default:
		for s.pos < len(s.src) {
			switch s.src[s.pos] {
			case ',', ']', '}', '\n', '#':
				return
			}
			s.pos++
		}
	}
}

// nested runs f one level deeper, giving up on the rest of the input when
// the nesting is too deep to follow.
func (s *scanner) nested(path string, f func(string)) {
	if s.depth >= maxScanDepth {
		s.pos = len(s.src)
		return
	}
	s.depth++
	f(path)
	s.depth--
}

// array reads "[v, v, ...]" with comments and newlines between elements.
func (s *scanner) array(path string) {
	s.pos++ // '['
	for i := 0; s.pos < len(s.src); {
		s.skipBlank(true)
		switch s.peek(0) {
		case 0:
			return
		case ']':
			s.pos++
			return
		case ',':
			s.pos++
			i++
			continue
		}
		elem := indexKey(path, i)
		s.record(elem, s.line)
		start := s.pos
		s.value(elem)
		if s.pos == start {
			return // not a value: give up on this array
		}
	}
}

// inlineTable reads "{k = v, ...}" (newlines allowed, as TOML 1.1 does).
func (s *scanner) inlineTable(path string) {
	s.pos++ // '{'
	for s.pos < len(s.src) {
		s.skipBlank(true)
		switch s.peek(0) {
		case 0:
			return
		case '}':
			s.pos++
			return
		case ',':
			s.pos++
			continue
		}
		line := s.line
		segs, ok := s.readKey("=")
		if !ok {
			return
		}
		p := path
		for _, k := range segs {
			p = joinKey(p, k)
			s.record(p, line)
		}
		s.value(p)
	}
}
