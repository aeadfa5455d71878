package conf

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// The TOML library parses the file into a tree of maps; conf then walks that
// tree against the Config struct itself rather than letting the library fill
// the struct. The library's own decoder stops at the first mismatch and names
// keys without array indexes ("pools.nodes.max_conns"); the walk reports every
// unknown key and wrong type with its full path ("pools[0].nodes[1].max_conns")
// and therefore its exact line.

// defaulter is implemented by the schema structs that have defaults. The
// decoder calls setDefaults on every new array entry before filling it in,
// so a key the file leaves out keeps its default and a key set to its zero
// value stays zero (and is then validated, or means "off" where documented).
type defaulter interface {
	setDefaults()
}

// decoder fills schema structs from a parsed TOML tree.
type decoder struct {
	errs *errorList
}

// decode stores raw into rv, reporting problems under path.
func (d *decoder) decode(path string, raw any, rv reflect.Value) {
	if u, ok := rv.Addr().Interface().(toml.Unmarshaler); ok {
		if err := u.UnmarshalTOML(raw); err != nil {
			d.errs.add(path, err.Error())
		}
		return
	}
	switch rv.Kind() {
	case reflect.Pointer:
		// An optional table: nil while absent, defaulted once present.
		elem := reflect.New(rv.Type().Elem())
		if def, ok := elem.Interface().(defaulter); ok {
			def.setDefaults()
		}
		d.decode(path, raw, elem.Elem())
		rv.Set(elem)
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			d.errs.add(path, "must be a table, got "+tomlType(raw))
			return
		}
		d.decodeStruct(path, m, rv)
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			d.errs.add(path, "must be a string, got "+tomlType(raw))
			return
		}
		rv.SetString(s)
	case reflect.Int:
		n, ok := raw.(int64)
		if !ok {
			d.errs.add(path, "must be an integer, got "+tomlType(raw))
			return
		}
		rv.SetInt(n)
	case reflect.Float64:
		switch v := raw.(type) {
		case float64:
			rv.SetFloat(v)
		case int64: // "1" is as much a number as "1.0"
			rv.SetFloat(float64(v))
		default:
			d.errs.add(path, "must be a number, got "+tomlType(raw))
		}
	case reflect.Bool:
		b, ok := raw.(bool)
		if !ok {
			d.errs.add(path, "must be true or false, got "+tomlType(raw))
			return
		}
		rv.SetBool(b)
	case reflect.Slice:
		var items []any
		switch v := raw.(type) {
		case []any:
			items = v
		case []map[string]any:
			items = make([]any, len(v))
			for i := range v {
				items[i] = v[i]
			}
		case map[string]any:
			if rv.Type().Elem().Kind() == reflect.Struct {
				d.errs.add(path, fmt.Sprintf("must be an array of tables: write [[%s]], not [%[1]s]", stripIndexes(path)))
				return
			}
			d.errs.add(path, "must be an array, got table")
			return
		default:
			d.errs.add(path, "must be an array, got "+tomlType(raw))
			return
		}
		s := reflect.MakeSlice(rv.Type(), len(items), len(items))
		for i, item := range items {
			elem := s.Index(i)
			if def, ok := elem.Addr().Interface().(defaulter); ok {
				def.setDefaults()
			}
			d.decode(indexKey(path, i), item, elem)
		}
		rv.Set(s)
	case reflect.Map:
		// Only map[string]any is in the schema: plugin config, handed on as is.
		m, ok := raw.(map[string]any)
		if !ok {
			d.errs.add(path, "must be a table, got "+tomlType(raw))
			return
		}
		rv.Set(reflect.ValueOf(m))
	default:
		panic(fmt.Sprintf("conf: schema field %s has unsupported kind %s", path, rv.Kind()))
	}
}

// decodeStruct fills the fields of rv from m by their toml tags; keys with
// no field are reported as unknown.
func (d *decoder) decodeStruct(path string, m map[string]any, rv reflect.Value) {
	fields := tomlFields(rv.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		key := joinKey(path, k)
		i, ok := fields[k]
		if !ok {
			what := "key"
			switch m[k].(type) {
			case map[string]any, []map[string]any:
				what = "section"
			}
			d.errs.add(key, fmt.Sprintf("unknown %s (known here: %s)", what, knownKeys(rv.Type())))
			continue
		}
		d.decode(key, m[k], rv.Field(i))
	}
}

// tomlFields maps the toml tag of each field of struct type t to its index.
func tomlFields(t reflect.Type) map[string]int {
	fields := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	return fields
}

// knownKeys lists the toml keys of struct type t in field order.
func knownKeys(t reflect.Type) string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}

// stripIndexes turns a key path into a table header name:
// "pools[0].nodes" becomes "pools.nodes".
func stripIndexes(path string) string {
	b := make([]byte, 0, len(path))
	skip := false
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '[':
			skip = true
		case c == ']' && skip:
			skip = false
		case !skip:
			b = append(b, c)
		}
	}
	return string(b)
}
