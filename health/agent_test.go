package health

import (
	"slices"
	"strings"
	"testing"
)

func TestParseAgent(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      agentHint
		malformed []string
	}{
		{"empty", "", agentHint{}, nil},
		{"up", "up", agentHint{up: true}, nil},
		{"drain", "drain", agentHint{drain: true}, nil},
		{"all", "up, drain, weight=10, load=42", agentHint{up: true, drain: true, weight: 10, load: 42, hasLoad: true}, nil},
		{"case and spaces", "  UP ,\tWeight = 7 , LOAD=0", agentHint{up: true, weight: 7, load: 0, hasLoad: true}, nil},
		{"empty tokens", ",,up,,", agentHint{up: true}, nil},
		{"unknown ignored", "maint, ready=yes, weight=3", agentHint{weight: 3}, nil},
		{"weight bounds", "weight=1", agentHint{weight: 1}, nil},
		{"weight top", "weight=1000", agentHint{weight: 1000}, nil},
		{"leading zeros", "weight=007", agentHint{weight: 7}, nil},
		{"last weight wins", "weight=5, weight=9", agentHint{weight: 9}, nil},
		{"bad weight keeps earlier", "weight=5, weight=x", agentHint{weight: 5}, []string{"weight=x"}},
		{"weight zero", "weight=0", agentHint{}, []string{"weight=0"}},
		{"weight too big", "weight=1001", agentHint{}, []string{"weight=1001"}},
		{"weight negative", "weight=-1", agentHint{}, []string{"weight=-1"}},
		{"weight plus", "weight=+1", agentHint{}, []string{"weight=+1"}},
		{"weight percent", "weight=50%", agentHint{}, []string{"weight=50%"}},
		{"weight empty", "weight=", agentHint{}, []string{"weight="}},
		{"weight bare", "weight", agentHint{}, []string{"weight"}},
		{"weight huge", "weight=99999999999999999999", agentHint{}, []string{"weight=99999999999999999999"}},
		{"load max", "load=999999999", agentHint{load: 999_999_999, hasLoad: true}, nil},
		{"load too long", "load=1000000000", agentHint{}, []string{"load=1000000000"}},
		{"load float", "load=1.5", agentHint{}, []string{"load=1.5"}},
		{"up with value", "up=1, drain=yes", agentHint{}, []string{"up=1", "drain=yes"}},
		{"unicode digits", "weight=٣", agentHint{}, []string{"weight=٣"}},
		{"malformed list capped", "weight=a,weight=b,weight=c,weight=d,weight=e", agentHint{},
			[]string{"weight=a", "weight=b", "weight=c", "weight=d"}},
		{"long token cut", "weight=" + strings.Repeat("x", 100), agentHint{},
			[]string{"weight=" + strings.Repeat("x", maxTokenLog-len("weight="))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad := parseAgent(tt.in)
			if got != tt.want {
				t.Errorf("parseAgent(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if !slices.Equal(bad, tt.malformed) {
				t.Errorf("malformed %q, want %q", bad, tt.malformed)
			}
		})
	}
}

// FuzzParseAgent checks that any header value parses without panicking,
// within bounds, and that the parsed hint renders to a header that parses
// back to the same hint with nothing malformed.
func FuzzParseAgent(f *testing.F) {
	for _, s := range []string{
		"", "up", "drain", "up, weight=10, load=42", "weight=0", "weight=1001", "weight=",
		"Weight = 7", ",,,", "load=999999999", "load=1000000000", "weight=٣", "up=1",
		"weight=" + strings.Repeat("9", 40), "\x00,\xff,weight=\t5\t", "drain,drain,drain",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		a, bad := parseAgent(h)
		if a.weight < 0 || a.weight > maxAgentWeight || a.load < 0 || a.load > maxAgentLoad {
			t.Fatalf("parseAgent(%q) out of bounds: %+v", h, a)
		}
		if !a.hasLoad && a.load != 0 {
			t.Fatalf("load %d without hasLoad", a.load)
		}
		if len(bad) > maxMalformed {
			t.Fatalf("%d malformed tokens kept, max %d", len(bad), maxMalformed)
		}
		for _, b := range bad {
			if len(b) > maxTokenLog {
				t.Fatalf("malformed token of %d bytes kept", len(b))
			}
		}
		back, bad2 := parseAgent(a.String())
		if back != a || len(bad2) != 0 {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v (malformed %q)", h, a, a.String(), back, bad2)
		}
	})
}
