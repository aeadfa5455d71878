// Package discovery finds a pool's relay nodes at run time: from DNS (A and
// AAAA records with a configured port, or SRV records carrying their own
// ports and weights) or from heartbeat keys that relays keep in Redis. A
// [Watcher] asks its [Source] every interval and hands each new set of
// nodes to its owner; a lookup that fails, or answers with no node at all,
// keeps the last good set, so a broken source never empties a pool.
//
// The package knows nothing of the gateway: the gateway turns each set into
// a pool's nodes the way a config reload does.
package discovery
