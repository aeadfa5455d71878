package health

import "strconv"

// State is a node's state as the checker decides it. The names and order
// mirror the balancer's states; the gateway maps one to the other.
type State int

const (
	// StateUp means the node takes new connections.
	StateUp State = iota
	// StateDown means Fall probes in a row failed; no new connections.
	StateDown
	// StateDraining means the node (or an admin) asked for no new
	// connections; its open tunnels are left alone.
	StateDraining
	// StateDrained means a draining node holds no live connection any
	// more.
	StateDrained
	// StateEjected means EjectAfter passive failures in a row took the
	// node out for EjectFor; probes then decide.
	StateEjected
)

// String returns "up", "down", "draining", "drained" or "ejected", or
// "State(N)" for an unknown value.
func (s State) String() string {
	switch s {
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	case StateDraining:
		return "draining"
	case StateDrained:
		return "drained"
	case StateEjected:
		return "ejected"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}
