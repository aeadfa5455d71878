package conf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Duration is a time.Duration read from a TOML string with a unit ("1.5s",
// "250ms", "2m"). A bare integer is rejected: the TOML library would read it
// as nanoseconds, which is never what an admin means. The zero value is 0s.
// Values are plain data and safe to copy.
type Duration struct{ time.Duration }

// UnmarshalTOML implements toml.Unmarshaler: it accepts only a string.
func (d *Duration) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		return d.UnmarshalText([]byte(v))
	case int64:
		return fmt.Errorf("must be a duration string with a unit such as \"30s\", got integer %d (a bare integer would be nanoseconds)", v)
	default:
		return fmt.Errorf("must be a duration string such as \"30s\", got %s", tomlType(v))
	}
}

// UnmarshalText parses a duration string such as "30s" (time.ParseDuration
// syntax).
func (d *Duration) UnmarshalText(b []byte) error {
	s := string(b)
	if s == "" {
		return errors.New("must be a duration string such as \"30s\", got \"\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a number with a unit such as \"250ms\", \"30s\" or \"2m\"", s)
	}
	d.Duration = v
	return nil
}

// MarshalText renders the duration as time.Duration.String does ("1m30s"), so
// that JSON and TOML output round-trips through UnmarshalText.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.Duration.String()), nil
}

// Size is a byte count read from a TOML integer (bytes) or from a string with
// a unit: binary "KiB", "MiB", "GiB", "TiB" (powers of 1024), decimal "KB"
// (or "kB"), "MB", "GB", "TB" (powers of 1000), or "B". Sizes are never
// negative. Values are plain data and safe to copy.
type Size int64

// sizeUnits lists the accepted suffixes, longest first so that "KiB" is
// tried before "B".
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1000}, {"kB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"TB", 1000 * 1000 * 1000 * 1000},
	{"B", 1},
}

// ParseSize parses a size string such as "64KiB", "1MB" or "512B". A string
// of digits alone is a number of bytes.
func ParseSize(s string) (Size, error) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("invalid size %q: want a whole number with a unit such as \"512B\", \"64KiB\", \"1MiB\" or \"10KB\"", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return Size(n * mult), nil
}

// UnmarshalTOML implements toml.Unmarshaler: it accepts a non-negative
// integer (bytes) or a size string.
func (z *Size) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("invalid size %d: must not be negative", v)
		}
		*z = Size(v)
		return nil
	case string:
		return z.UnmarshalText([]byte(v))
	default:
		return fmt.Errorf("must be a size such as \"1MiB\" or an integer number of bytes, got %s", tomlType(v))
	}
}

// UnmarshalText parses a size string (see ParseSize).
func (z *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*z = v
	return nil
}

// MarshalText renders the size with the largest binary unit that divides it
// exactly ("1MiB", "1500B"), so that it round-trips through UnmarshalText.
func (z Size) MarshalText() ([]byte, error) {
	return []byte(z.String()), nil
}

// String renders the size as MarshalText does.
func (z Size) String() string {
	n := int64(z)
	if n < 0 {
		return strconv.FormatInt(n, 10) + "B"
	}
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// tomlType names the TOML type of a value produced by the TOML parser, for
// error messages.
func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case time.Time:
		return "datetime"
	case []any:
		return "array"
	case []map[string]any:
		return "array of tables"
	case map[string]any:
		return "table"
	default:
		return fmt.Sprintf("%T", v)
	}
}

var (
	_ toml.Unmarshaler = (*Duration)(nil)
	_ toml.Unmarshaler = (*Size)(nil)
)
