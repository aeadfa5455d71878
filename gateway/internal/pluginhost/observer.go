package pluginhost

import "time"

// Outcome is the result of one plugin step in a chain.
type Outcome uint8

// Outcomes, as reported to an Observer.
const (
	// OutcomeAllow: the plugin admitted the client.
	OutcomeAllow Outcome = iota
	// OutcomeDeny: the plugin refused the client.
	OutcomeDeny
	// OutcomeError: the plugin answered with an error or a malformed
	// decision.
	OutcomeError
	// OutcomeUnavailable: the plugin was down, unreachable or timed out.
	OutcomeUnavailable
)

// String returns the outcome's metric label: "allow", "deny", "error" or
// "unavailable".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllow:
		return "allow"
	case OutcomeDeny:
		return "deny"
	case OutcomeError:
		return "error"
	default:
		return "unavailable"
	}
}

// Observer receives one event per plugin step of every Authenticate: a
// call to the plugin process (cached false, latency the call's duration) or
// a decision served from the cache (cached true, latency 0). It is called
// synchronously from concurrent Authenticate calls, so it must be safe for
// concurrent use and fast (increment a counter, observe a histogram).
type Observer interface {
	Observe(plugin string, outcome Outcome, cached bool, latency time.Duration)
}

type nopObserver struct{}

func (nopObserver) Observe(string, Outcome, bool, time.Duration) {}
