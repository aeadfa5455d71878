package conf

import (
	"errors"
	"fmt"
	"os"
	"reflect"

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
		return nil, syntaxError(file, err)
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
func syntaxError(file string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: file, Line: pe.Position.Line, Msg: pe.Message}
	}
	return &Error{File: file, Msg: err.Error()}
}
