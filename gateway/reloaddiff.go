package gateway

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/wsgate/wsgate/conf"
)

// What asked for a reload (the trigger of its log line and of GET
// /api/reload).
const (
	ReloadSignal = "signal" // SIGHUP
	ReloadFile   = "file"   // the config file changed (the watcher)
	ReloadAPI    = "api"    // POST /api/reload, or a call of Reload
)

// maxChanges bounds the changes a reload's log line lists; the others
// are counted ("and N more").
const maxChanges = 20

// configChanges lists what differs from old to cfg, for a reload's log
// line, by key path and never by value (a value may be a secret):
// "added pools[chat]", "removed pools[relay].nodes[10.0.0.7:7001]",
// "added routes[chat.example.com/ws -> chat]", "changed
// gateway.max_conns". Pools, plugins and certificates are named by their
// name, nodes by their address, routes by host, path prefix and pool; an
// entry on one side only is added or removed as a whole, one on both is
// compared key by key. An empty list means the file says what the running
// config says.
func configChanges(old, cfg *conf.Config) []string {
	var a, b any
	if err := remarshal(old, &a); err != nil {
		return []string{"unknown: " + err.Error()}
	}
	if err := remarshal(cfg, &b); err != nil {
		return []string{"unknown: " + err.Error()}
	}
	if m, ok := a.(map[string]any); ok {
		delete(m, "file") // where it was read from, not what it says
	}
	if m, ok := b.(map[string]any); ok {
		delete(m, "file")
	}
	var out []string
	diffValue("", a, b, &out)
	if len(out) > maxChanges {
		out = append(out[:maxChanges], fmt.Sprintf("and %d more", len(out)-maxChanges))
	}
	return out
}

// remarshal is v as generic JSON values.
func remarshal(v any, into *any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// diffValue appends the differences between a and b, found at path.
func diffValue(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			diffValue(joinPath(path, k), av[k], bv[k], out)
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		ak, bk := elementKeys(path, av), elementKeys(path, bv)
		if ak == nil || bk == nil {
			break // a list of values: compared whole
		}
		for i, k := range ak {
			j := slices.Index(bk, k)
			if j < 0 {
				*out = append(*out, "removed "+path+"["+k+"]")
				continue
			}
			diffValue(path+"["+k+"]", av[i], bv[j], out)
		}
		for _, k := range bk {
			if !slices.Contains(ak, k) {
				*out = append(*out, "added "+path+"["+k+"]")
			}
		}
		return
	}
	if !jsonEqual(a, b) {
		*out = append(*out, "changed "+path)
	}
}

// elementKeys names the entries of a list of tables (see configChanges),
// each once ("#2" marks a second entry of the same name); nil for a list
// of plain values.
func elementKeys(path string, list []any) []string {
	keys := make([]string, len(list))
	seen := map[string]int{}
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil
		}
		var k string
		switch {
		case path == "routes":
			host, _ := m["host"].(string)
			prefix, _ := m["path_prefix"].(string)
			pool, _ := m["pool"].(string)
			if host == "" {
				host = "*"
			}
			k = host + prefix + " -> " + pool
		case m["name"] != nil:
			k = fmt.Sprint(m["name"])
		case m["addr"] != nil:
			k = fmt.Sprint(m["addr"])
		case m["cert_file"] != nil:
			k = fmt.Sprint(m["cert_file"])
		default:
			k = fmt.Sprint(i)
		}
		seen[k]++
		if n := seen[k]; n > 1 {
			k += fmt.Sprintf(" #%d", n)
		}
		keys[i] = k
	}
	return keys
}

// joinPath appends key k to path.
func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonEqual reports whether two generic JSON values are the same.
func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// changesAttr is the list for the log line: "none" when nothing changed.
func changesAttr(changes []string) string {
	if len(changes) == 0 {
		return "none"
	}
	return strings.Join(changes, "; ")
}
