package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
)

// maxKeyLine bounds one line of the keys file.
const maxKeyLine = 64 << 10

// keySet maps the SHA-256 of each key to its user id (empty if the line
// named none). Keys are looked up by hash so no comparison runs over the
// secret itself. A keySet is never modified once built.
type keySet map[[32]byte]string

// parseKeys parses a keys file: one key per line, optionally followed by
// whitespace and a user id; blank lines and lines starting with # are
// skipped, and a # field ends the line. Errors name the line.
func parseKeys(b []byte) (keySet, error) {
	ks := keySet{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxKeyLine)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		switch len(fields) {
		case 0:
			continue
		case 1, 2:
		default:
			return nil, fmt.Errorf("line %d: want \"key\" or \"key user-id\", got %d fields", n, len(fields))
		}
		h := sha256.Sum256([]byte(fields[0]))
		if _, dup := ks[h]; dup {
			return nil, fmt.Errorf("line %d: key listed twice", n)
		}
		user := ""
		if len(fields) == 2 {
			user = fields[1]
		}
		ks[h] = user
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line too long or unreadable: %w", err)
	}
	return ks, nil
}

// lookup returns the user id of key and whether it is listed.
func (ks keySet) lookup(key string) (string, bool) {
	u, ok := ks[sha256.Sum256([]byte(key))]
	return u, ok
}
