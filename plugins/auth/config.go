package auth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// DecodeConfig decodes a Configure config table into v, a pointer to a
// struct with json field tags, and rejects keys v has no field for. Errors
// wrap ErrInvalidConfig. Decode durations into Duration.
func DecodeConfig(config map[string]any, v any) error {
	b, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
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
