package admin

import "github.com/wsgate/wsgate/gateway/internal/pluginhost"

// Nodes is the answer of GET /api/nodes.
type Nodes struct {
	Ready      bool                      `json:"ready"`
	Draining   bool                      `json:"draining"`
	Tunnels    int                       `json:"tunnels"`
	Handshakes map[string]uint64         `json:"handshakes"`
	Frames     Direction                 `json:"frames"`
	Bytes      Direction                 `json:"bytes"`
	Pools      []Pool                    `json:"pools"`
	Generation uint64                    `json:"generation"`
	Plugins    []pluginhost.PluginStatus `json:"plugins"`
	Reload     any                       `json:"reload"` // Gateway.LastReload
}

// Direction is a count of the tunnels' frames or bytes each way.
type Direction struct {
	ToNode   uint64 `json:"to_node"`
	ToClient uint64 `json:"to_client"`
}

// Pool is one pool and its nodes as the admin API shows them.
type Pool struct {
	Name    string `json:"name"`
	Balance string `json:"balance"`
	Nodes   []Node `json:"nodes"`
}

// Node is one node as the admin API shows it.
type Node struct {
	Addr     string `json:"addr"`
	State    string `json:"state"`
	Live     int    `json:"live"`
	MaxConns int    `json:"max_conns"`
	Weight   int    `json:"weight"`
	Check    *Check `json:"check,omitempty"`
}

// Check is the node's last health check, when the pool checks health.
type Check struct {
	Last                string  `json:"last,omitempty"`
	LatencyMS           float64 `json:"latency_ms"`
	Result              string  `json:"result"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	ConsecutivePasses   int     `json:"consecutive_passes"`
	PassiveFailures     int     `json:"passive_failures"`
	AgentWeight         int     `json:"agent_weight,omitempty"`
	AgentLoad           int     `json:"agent_load,omitempty"`
	AdminDrain          bool    `json:"admin_drain"`
}
