package conf

import (
	"errors"
	"sort"
	"strconv"
)

// Error is one problem in a config file: where it is and what is wrong.
// Error() renders "FILE:LINE: KEY: MSG"; the line is left out ("FILE: KEY:
// MSG") when it is unknown, and the key is left out for pure syntax errors.
// Key is a path such as "pools[0].nodes[1].max_conns" (indexes from 0).
// An Error is plain data, safe to copy and to share.
type Error struct {
	File string // File is the name given to Parse or Load.
	Line int    // Line is 1-based; 0 when unknown.
	Key  string // Key is the key path; "" for syntax errors.
	Msg  string // Msg says what is wrong and, where it helps, what is allowed.
}

// Error renders the error as "FILE:LINE: KEY: MSG".
func (e *Error) Error() string {
	b := make([]byte, 0, len(e.File)+len(e.Key)+len(e.Msg)+16)
	b = append(b, e.File...)
	if e.Line > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	b = append(b, ": "...)
	if e.Key != "" {
		b = append(b, e.Key...)
		b = append(b, ": "...)
	}
	b = append(b, e.Msg...)
	return string(b)
}

// errorList collects the problems found in one file.
type errorList struct {
	file  string
	lines *lineIndex
	errs  []*Error
}

// add records a problem at key, whose line is looked up in the file.
func (l *errorList) add(key, msg string) {
	l.errs = append(l.errs, &Error{File: l.file, Line: l.lines.Line(key), Key: key, Msg: msg})
}

// err returns nil, the single *Error, or all of them joined with errors.Join
// in file order (problems without a line come last).
func (l *errorList) err() error {
	switch len(l.errs) {
	case 0:
		return nil
	case 1:
		return l.errs[0]
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i].Line, l.errs[j].Line
		if a == 0 || b == 0 {
			return a != 0 && b == 0
		}
		return a < b
	})
	errs := make([]error, len(l.errs))
	for i, e := range l.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}
