package conf

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Load reads the config file at path and parses it (see Parse). Errors in
// the file name path as given.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes data strictly, applies defaults, validates the result and
// computes derived values. file names the source in error messages. On
// failure it returns either one *Error or several joined with errors.Join,
// in file order; errors.As finds each *Error. A syntax error stops at the
// first one; decode errors (unknown keys, wrong types) are all reported
// before validation runs.
func Parse(file string, data []byte) (*Config, error) {
	var tree map[string]any
	if _, err := toml.Decode(string(data), &tree); err != nil {
		return nil, syntaxError(file, data, err)
	}
	errs := &errorList{file: file, lines: indexLines(data)}
	cfg := &Config{File: file}
	cfg.setDefaults()
	d := decoder{errs: errs}
	d.decodeStruct("", tree, reflect.ValueOf(cfg).Elem())
	if err := errs.err(); err != nil {
		return nil, err
	}
	cfg.validate(errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	cfg.derive()
	cfg.lines = errs.lines
	return cfg, nil
}

// syntaxError turns a TOML library error into an *Error with the line.
// An unquoted duration (timeout = 30s), which TOML cannot parse, gets
// the key and what to write instead of the parser's message alone.
func syntaxError(file string, data []byte, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		if key, val, ok := bareDuration(data, pe.Position.Line); ok {
			return &Error{File: file, Line: pe.Position.Line, Key: key,
				Msg: fmt.Sprintf("durations are quoted strings, e.g. \"30s\": write %s = %q", lastSegment(key), val)}
		}
		return &Error{File: file, Line: pe.Position.Line, Msg: pe.Message}
	}
	return &Error{File: file, Msg: err.Error()}
}

// bareDuration reports whether line (1-based) of src sets a duration key
// of Config to an unquoted duration, and returns the key's path and the
// value; of several on the line, the first. The line scanner finds the
// key's path even in a file the TOML library refused.
func bareDuration(src []byte, line int) (key, val string, ok bool) {
	lines := strings.Split(string(src), "\n")
	if line < 1 || line > len(lines) {
		return "", "", false
	}
	text, at := lines[line-1], -1
	for p, n := range indexLines(src).lines {
		if n != line || !isDurationKey(p) {
			continue
		}
		re := regexp.MustCompile(`(?:^|[\s{,."'])` + regexp.QuoteMeta(lastSegment(p)) + `["']?\s*=\s*([^\s,}#]+)`)
		m := re.FindStringSubmatchIndex(text)
		if m == nil || (at >= 0 && m[0] > at) {
			continue
		}
		if v := text[m[2]:m[3]]; v[0] != '"' && v[0] != '\'' {
			if _, err := time.ParseDuration(v); err == nil {
				key, val, at = p, v, m[0]
			}
		}
	}
	return key, val, key != ""
}

// isDurationKey reports whether the key path names a Duration field of
// Config.
func isDurationKey(path string) bool {
	t := reflect.TypeOf(Config{})
	for seg := range strings.SplitSeq(stripIndexes(path), ".") {
		for t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		i, ok := tomlFields(t)[seg]
		if !ok {
			return false
		}
		t = t.Field(i).Type
	}
	return t == reflect.TypeOf(Duration{})
}

// lastSegment is the last key of a path: "drain_window" of
// "gateway.drain_window".
func lastSegment(path string) string {
	return path[strings.LastIndexByte(path, '.')+1:]
}
