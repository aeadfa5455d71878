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

// Policy names accepted by [NewPicker].
const (
	// PolicyLeastConn selects [LeastConn].
	PolicyLeastConn = "least_conn"
	// PolicyRoundRobin selects [RoundRobin].
	PolicyRoundRobin = "round_robin"
)

// ErrUnknownPolicy is returned (wrapped) by [NewPicker] for a policy name it
// does not know; the message names the policy and lists the known ones.
// Fix the pool's balance setting.
var ErrUnknownPolicy = errors.New("balancer: unknown policy")

// Policies returns the policy names [NewPicker] accepts, in a fixed order.
func Policies() []string {
	return []string{PolicyLeastConn, PolicyRoundRobin}
}

// NewPicker returns a new picker for the named policy: "least_conn" or
// "round_robin". An unknown name yields an error wrapping
// [ErrUnknownPolicy].
func NewPicker(policy string) (Picker, error) {
	switch policy {
	case PolicyLeastConn:
		return &LeastConn{}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	}
	return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, policy, strings.Join(Policies(), ", "))
}
