package conf

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// schemaKeys lists the dotted key of every field of struct type t, without
// array indexes ("pools.nodes.addr"), tables included.
func schemaKeys(prefix string, t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := joinKey(prefix, name)
		ft := f.Type
		if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Duration]() {
			keys = append(keys, schemaKeys(key, ft)...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

// TestReferenceDocsCoverSchema checks that docs/config.md has a row for every
// key and that the shipped wsgate.toml sets (or, for plugins, shows) every
// key, so neither falls behind the schema.
func TestReferenceDocsCoverSchema(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := os.ReadFile("wsgate.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range schemaKeys("", reflect.TypeFor[Config]()) {
		t.Run(key, func(t *testing.T) {
			if !strings.Contains(string(doc), "| `"+key+"` |") {
				t.Errorf("docs/config.md has no row for `%s`", key)
			}
			leaf := key[strings.LastIndex(key, ".")+1:]
			if key == "plugins.config" {
				leaf = `\[plugins\.config\]`
			} else {
				leaf += " ="
			}
			if !regexp.MustCompile(`(?m)^[ #]*` + leaf).Match(ref) {
				t.Errorf("wsgate.toml does not show %s", key)
			}
		})
	}
}
