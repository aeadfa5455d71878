#!/usr/bin/env bash
# The by-hand rebalancing figure of docs/benchmarks.md (not run in CI):
#
#   bench/rebalance.sh [CLIENTS] [MOVES_PER_SECOND]     (default 6000 100)
#
# Starts a redis-server, three relay-backend processes sharing it, and one
# wsgate whose pool "relay" names the first two relays, with
# [pools.rebalance] tolerance = 0.05 and rate = MOVES_PER_SECOND. Two
# wsload drain runs (relay.v1, rooms of 10, 0.1 writes a second per
# client, half the clients each) connect CLIENTS clients; 10 s later one
# run's -kill-cmd copies a config naming all three relays over the
# gateway's file, which the gateway's watcher reloads. A poller reads
# /api/nodes and /metrics every 100 ms. The script prints wsload's tables,
# the moves counted by the gateway, and the time from the reload until
# every client was connected and every node within 5% of the average.
# DURATION (default 90s) is how long the clients write. Everything it
# started is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

clients=${1:-6000}
rate=${2:-100}
duration=${DURATION:-90s}
dir=$(mktemp -d /tmp/wsgate-rebalance-XXXXXX)
. bench/lib.sh
stack_init
start_relays 3
gw=127.0.0.1:$(free)
admin=127.0.0.1:$(free)

config() { # the gateway's config naming the relays given
	cat <<EOF
[gateway]
listen = "$gw"
[admin]
listen = "$admin"
[[pools]]
name = "relay"
  [pools.health]
  interval = "500ms"
  timeout = "400ms"
  [pools.rebalance]
  tolerance = 0.05
  rate = $rate
EOF
	for a in "$@"; do printf '  [[pools.nodes]]\n  addr = "%s"\n' "$a"; done
	printf '[[routes]]\npath_prefix = "/room/"\npool = "relay"\n'
}
config "${relays[0]}" "${relays[1]}" >"$dir/wsgate.toml"
config "${relays[@]}" >"$dir/three.toml"

start_gateway

# One line per poll: unix time, moves so far, config generation, live
# count per node.
poll() {
	while :; do
		printf '%s %s ' "$(date +%s.%N)" \
			"$(curl -s "http://$admin/metrics" | awk '/^wsgate_rebalance_moves_total/ {s += $2} END {print s + 0}')"
		curl -s "http://$admin/api/nodes" | jq -r '[.generation] + [.pools[0].nodes[].live] | @tsv' || echo
		sleep 0.1
	done
}
poll >"$dir/nodes.tsv" &
poller=$!

# Two wsload processes, each half the clients in rooms of its own (its
# own URL prefix): wsload -procs would not pass the kill command's
# absence to its second child.
set +e
"$dir/wsload" drain -url "ws://$gw/room/rb-b%d" -rooms $((clients / 20)) -members 10 \
	-rate 0.1 -connect-rate 500 -duration "$duration" -after 10s -window 1s -give-up 60s \
	-kill-cmd true -json >"$dir/report-b.json" 2>"$dir/wsload-b.err" &
other=$!
"$dir/wsload" drain -url "ws://$gw/room/rb-a%d" -rooms $((clients / 20)) -members 10 \
	-rate 0.1 -connect-rate 500 -duration "$duration" -after 10s -window 1s -give-up 60s \
	-kill-cmd "cp $dir/three.toml $dir/wsgate.toml" -json >"$dir/report.json" 2>"$dir/wsload.err"
status=$?
wait "$other" || status=1
set -e
kill "$poller" 2>/dev/null || true
wait "$poller" 2>/dev/null || true

tail -n 20 "$dir/wsload.err" "$dir/wsload-b.err"
echo "moves (wsgate_rebalance_moves_total):"
curl -s "http://$admin/metrics" | grep '^wsgate_rebalance_moves_total' || echo "  none"
jq -r '"\(input_filename): connected \(.connected)  failed \(.failed) \(.failed_by)  close_codes \(.close_codes)  lost_writes \(.lost_writes)  gaps \(.gaps)  back \(.back)  not_back \(.not_back)"' "$dir/report.json" "$dir/report-b.json"
awk -v n="$clients" '
	$3 >= 2 && !r { r = $1 }
	r && NF == 6 && !c {
		s = $4 + $5 + $6; avg = s / 3; ok = (s == n)
		for (i = 4; i <= 6; i++) if ($i > 1.05 * avg || $i < 0.95 * avg) ok = 0
		if (ok) { c = $1; m = $2; line = $4 " " $5 " " $6 }
	}
	END {
		if (!r) { print "no reload seen"; exit }
		if (!c) { print "not converged"; exit }
		printf "converged %.1f s after the reload, %d moves by then; live per node: %s\n", c - r, m, line
	}' "$dir/nodes.tsv"
exit $status
