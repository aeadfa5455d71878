package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// DecodeConfig decodes a Configure config table into v, a pointer to a
// struct with json field tags, and rejects keys v has no field for. Errors
// wrap ErrInvalidConfig and name the key in the table's terms: `unknown
// key "secret_env" (known: a, b)`, `token_from: wrong type: got string,
// want []string`. Decode durations into Duration.
func DecodeConfig(config map[string]any, v any) error {
	b, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, explainDecode(err, v))
	}
	return nil
}

// decodeError is a JSON decoding error retold for a config table.
type decodeError struct {
	msg string
	err error
}

func (e *decodeError) Error() string { return e.msg }
func (e *decodeError) Unwrap() error { return e.err }

// explainDecode retells err, from decoding a config table into v, in the
// table's terms: keys, not JSON fields.
func explainDecode(err error, v any) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &decodeError{fmt.Sprintf("%s: wrong type: got %s, want %s", te.Field, tomlKind(te.Value), te.Type), err}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		msg := "unknown key " + name
		if known := jsonKeys(v); len(known) > 0 {
			msg += " (known: " + strings.Join(known, ", ") + ")"
		}
		return &decodeError{msg, err}
	}
	return &decodeError{strings.TrimPrefix(err.Error(), "json: "), err}
}

// tomlKind names a JSON value kind as TOML does.
func tomlKind(jsonKind string) string {
	switch jsonKind {
	case "object":
		return "table"
	case "bool":
		return "boolean"
	}
	return jsonKind
}

// jsonKeys lists the json names of the fields of the struct v points to.
func jsonKeys(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}

// Duration is a config value written as a duration string ("30s"); it
// decodes with DecodeConfig. A bare number is rejected, since its unit
// would be a guess.
type Duration struct{ time.Duration }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"30s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// encodeConfig renders the config table for the wire.
func encodeConfig(config map[string]any) ([]byte, error) {
	if config == nil {
		config = map[string]any{}
	}
	return json.Marshal(config)
}

// decodeConfig parses the wire form back into the TOML types: whole
// numbers become int64, others float64.
func decodeConfig(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if m == nil {
		m = map[string]any{}
	}
	v, err := normalize(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return v.(map[string]any), nil
}

func normalize(v any) (any, error) {
	var err error
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i, nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return f, nil
	case map[string]any:
		for k, e := range v {
			if v[k], err = normalize(e); err != nil {
				return nil, err
			}
		}
		return v, nil
	case []any:
		for i, e := range v {
			if v[i], err = normalize(e); err != nil {
				return nil, err
			}
		}
		return v, nil
	default:
		return v, nil
	}
}
