package balancer

import (
	"errors"
	"fmt"
	"strings"
)

// Picker chooses one node among candidates. Implementations must be safe for
// concurrent use and must not keep or modify the candidates slice.
type Picker interface {
	// Pick returns one of candidates. The candidates are already filtered
	// (up, under their cap, not excluded) and non-empty; given an empty
	// slice, Pick returns nil.
	Pick(candidates []*Node) *Node
}

// KeyPicker is a [Picker] that can also choose by a key taken from the
// request (a room id, say), so requests with the same key meet on the same
// node. [Pool.AcquireKey] calls PickKey when its picker has it.
type KeyPicker interface {
	Picker
	// PickKey is Pick for requests carrying key; an empty key means the
	// request carried none.
	PickKey(candidates []*Node, key []byte) *Node
}

// Policy names accepted by [NewPicker].
const (
	// PolicyLeastConn selects [LeastConn].
	PolicyLeastConn = "least_conn"
	// PolicyRoundRobin selects [RoundRobin].
	PolicyRoundRobin = "round_robin"
	// PolicyP2C selects [P2C].
	PolicyP2C = "p2c"
	// PolicyHash selects [Hash] with [DefaultHashBalanceFactor]; use
	// [NewHash] for another factor.
	PolicyHash = "hash"
)

// ErrUnknownPolicy is returned (wrapped) by [NewPicker] for a policy name it
// does not know; the message names the policy and lists the known ones.
// Fix the pool's balance setting.
var ErrUnknownPolicy = errors.New("balancer: unknown policy")

// Policies returns the policy names [NewPicker] accepts, in a fixed order.
func Policies() []string {
	return []string{PolicyLeastConn, PolicyRoundRobin, PolicyP2C, PolicyHash}
}

// NewPicker returns a new picker for the named policy: "least_conn",
// "round_robin", "p2c" or "hash" (with [DefaultHashBalanceFactor]). An
// unknown name yields an error wrapping [ErrUnknownPolicy].
func NewPicker(policy string) (Picker, error) {
	switch policy {
	case PolicyLeastConn:
		return &LeastConn{}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyP2C:
		return &P2C{}, nil
	case PolicyHash:
		return NewHash(DefaultHashBalanceFactor), nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, policy, strings.Join(Policies(), ", "))
}
