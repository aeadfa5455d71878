// Package conf is wsgate's configuration: the TOML schema, its defaults, a
// strict loader and the validation rules.
//
// Load and Parse go through four steps. The file is parsed by
// github.com/BurntSushi/toml; a syntax error stops there with its line. The
// parsed tree is then decoded over a Config that already holds the defaults,
// so a key left out keeps its default while a key written as 0 or "" is kept
// as written. Unknown keys and values of the wrong type are errors, all of
// them reported at once. The decoded Config is validated as a whole (ranges,
// addresses, references between routes, pools and plugins), and finally
// derived values (a node's inherited connection cap) are filled in once.
//
// Every problem is an *Error naming file, line and key path, such as
//
//	wsgate.toml:14: pools[0].nodes[1].max_conns: must be >= 0, got -5
//
// Durations are strings with a unit ("30s"); a bare integer is rejected
// because it would silently mean nanoseconds. Sizes are integers (bytes) or
// strings with a unit ("64KiB", "1MB").
//
// The commented reference file conf/wsgate.toml lists every key with its
// default; docs/config.md describes them.
package conf
