package health

import (
	"strconv"
	"strings"
)

// AgentHeader is the response header in which a node's agent reports its
// own state on a health answer: comma-separated tokens "up", "drain",
// "weight=N" (1..1000) and "load=N" (open connections, shown in status).
// Tokens are matched case-insensitively; unknown tokens are ignored.
const AgentHeader = "Wsgate-Agent"

// Bounds on agent values.
const (
	maxAgentWeight = 1000
	maxAgentLoad   = 999_999_999 // nine digits: fits any int
	maxMalformed   = 4           // malformed tokens kept for the log
	maxTokenLog    = 64          // bytes of a malformed token kept for the log
)

// agentHint is what one AgentHeader value said.
type agentHint struct {
	up, drain bool
	weight    int // 1..1000; 0 = not given
	load      int // >= 0, when hasLoad
	hasLoad   bool
}

// parseAgent parses an AgentHeader value. Empty tokens and unknown tokens
// are skipped; a known token with a bad value (weight out of 1..1000,
// anything but decimal digits) is skipped and returned in malformed (at
// most maxMalformed, each cut to maxTokenLog bytes) so the caller can log
// it. When a token repeats, the last valid one wins. It never fails.
func parseAgent(h string) (a agentHint, malformed []string) {
	bad := func(tok string) {
		if len(malformed) < maxMalformed {
			if len(tok) > maxTokenLog {
				tok = tok[:maxTokenLog]
			}
			malformed = append(malformed, tok)
		}
	}
	for tok := range strings.SplitSeq(h, ",") {
		tok = strings.TrimSpace(tok)
		key, val, hasVal := strings.Cut(tok, "=")
		key = strings.TrimSpace(key)
		switch {
		case tok == "":
		case strings.EqualFold(key, "up"), strings.EqualFold(key, "drain"):
			if hasVal {
				bad(tok)
				continue
			}
			if len(key) == 2 {
				a.up = true
			} else {
				a.drain = true
			}
		case strings.EqualFold(key, "weight"):
			n, ok := parseDigits(val, hasVal, maxAgentWeight)
			if !ok || n < 1 {
				bad(tok)
				continue
			}
			a.weight = n
		case strings.EqualFold(key, "load"):
			n, ok := parseDigits(val, hasVal, maxAgentLoad)
			if !ok {
				bad(tok)
				continue
			}
			a.load, a.hasLoad = n, true
		}
	}
	return a, malformed
}

// parseDigits parses a non-empty run of ASCII decimal digits (spaces around
// it allowed) no larger than maxV.
func parseDigits(s string, present bool, maxV int) (int, bool) {
	s = strings.TrimSpace(s)
	if !present || s == "" || len(s) > 9 {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxV {
		return 0, false
	}
	return n, true
}

// String renders the hint as an AgentHeader value that parses back to it.
func (a agentHint) String() string {
	var toks []string
	if a.up {
		toks = append(toks, "up")
	}
	if a.drain {
		toks = append(toks, "drain")
	}
	if a.weight > 0 {
		toks = append(toks, "weight="+strconv.Itoa(a.weight))
	}
	if a.hasLoad {
		toks = append(toks, "load="+strconv.Itoa(a.load))
	}
	return strings.Join(toks, ", ")
}
