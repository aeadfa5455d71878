package registry

import (
	"time"

	"github.com/wsgate/wsgate/balancer"
	"github.com/wsgate/wsgate/gateway/internal/tunnel"
)

// Entry is what a live tunnel keeps for its life: the node slot (the
// gateway's connection slot belongs to the client socket and is freed when
// it closes), and what the registry knows of it. Release frees the node
// slot, once. It is the tunnel's Lease (tunnel.Params), so the tunnel's end
// finds its entry.
//
// An entry is 64 bytes: the links of the two lists it is on (every live
// tunnel, and its node's), and pointers to what only some tunnels have.
type Entry struct {
	lease *balancer.Lease
	t     *tunnel.Tunnel // set once the tunnel is made
	// prev and next link every live tunnel (Tunnels.head); nodePrev and
	// nodeNext link its node's (nodeList.head). Both under the
	// registry's lock.
	prev, next         *Entry
	nodePrev, nodeNext *Entry
	expiry             *time.Timer // closes the tunnel when its credential expires
	// info is what only some tunnels have: a credential, or the access
	// log's fields; nil otherwise.
	info *Info
}

// Info is the part of an entry that the auth chain or the access log fills
// in. The registry indexes a tunnel by its credential's Subject and Key, so
// a revocation finds the tunnels it names without walking the others.
type Info struct {
	Expires time.Time // the credential's expiry (zero: none)
	Subject string    // the credential's subject, for revocations
	Key     string    // the credential's id, for revocations by key

	// For the access log (empty while it is off):
	Client string    // the client's address
	Path   string    // the request's path, without query string
	Route  string    // the route's name
	Start  time.Time // when the handshake arrived
	H2     bool      // the client's WebSocket is an HTTP/2 stream

	// The links of the tunnels of one subject and of one key, under the
	// registry's lock.
	subjectPrev, subjectNext *Entry
	keyPrev, keyNext         *Entry
}

// noInfo is the Info of an entry that has none.
var noInfo Info

// NewEntry returns the entry of a tunnel to lease's node; info, when not
// nil, is the credential and access-log fields the entry keeps (and owns
// from now on).
func NewEntry(lease *balancer.Lease, info *Info) *Entry {
	return &Entry{lease: lease, info: info}
}

// Info is the entry's credential and access-log fields, or an empty Info.
// The fields are not to be changed once the entry is added.
func (e *Entry) Info() *Info {
	if e.info == nil {
		return &noInfo
	}
	return e.info
}

// Node is the node the tunnel runs to.
func (e *Entry) Node() *balancer.Node { return e.lease.Node() }

// Tunnel is the entry's tunnel, nil until SetTunnel.
func (e *Entry) Tunnel() *tunnel.Tunnel { return e.t }

// SetTunnel records the tunnel made with this entry as its Lease, before
// the entry is added.
func (e *Entry) SetTunnel(t *tunnel.Tunnel) { e.t = t }

// SetExpiry records the timer that closes the tunnel when its credential
// expires, before the entry is added; Remove stops it.
func (e *Entry) SetExpiry(timer *time.Timer) { e.expiry = timer }

// Release frees the node's slot; it is idempotent.
func (e *Entry) Release() {
	e.lease.Release()
}

// entryOf is the entry a tunnel was made with.
func entryOf(t *tunnel.Tunnel) *Entry { return t.Lease().(*Entry) }
