#!/usr/bin/env bash
# The by-hand load measurements of docs/benchmarks.md (not run in CI):
#
#   bench/byhand.sh idle9000     9,000 idle through one gateway to two relays, 5-minute hold
#   bench/byhand.sh idle50000    50,000 idle through six gateways to five relays, 60s hold
#   bench/byhand.sh drain        relay.v1 fanout through the gateway, relay 1 drained by the admin API
#   bench/byhand.sh drain-term   the same, relay 1 drained by SIGTERM (its own 1001 drain)
#   bench/byhand.sh kill         the same, relay 1 killed with SIGKILL
#
# Each starts `benchrun -up` (redis-server, relays and gateways on 127.0.0.1,
# stopped by benchrun's PID at the end), runs wsload against it and prints
# wsload's table, the gateway's RSS per connection where it applies, and
# where the raw reports are. Exit status 1 when a wsload threshold failed.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
case $what in
idle9000) relays=2 gateways=1 ;;
idle50000) relays=5 gateways=6 ;;
drain | drain-term | kill) relays=3 gateways=1 ;;
*)
	sed -n '2,9p' "$0"
	exit 2
	;;
esac

dir=$(mktemp -d /tmp/wsgate-byhand-XXXXXX)
go build -o "$dir/benchrun" ./bench/cmd/benchrun
"$dir/benchrun" -up -relays "$relays" -gateways "$gateways" -dir "$dir" >"$dir/up.out" 2>"$dir/up.err" &
up=$!
stop() {
	kill -TERM "$up" 2>/dev/null || true
	wait "$up" 2>/dev/null || true
}
trap stop EXIT

for _ in $(seq 1 600); do
	grep -q '^running;' "$dir/up.out" && break
	kill -0 "$up" 2>/dev/null || { cat "$dir/up.err"; exit 1; }
	sleep 0.2
done
grep -q '^running;' "$dir/up.out" || { echo "stack not up after 120s" >&2; exit 1; }
cat "$dir/up.out"

wsload=$(awk '$1 == "wsload" {print $2}' "$dir/up.out")
mapfile -t gw < <(awk '$1 ~ /^wsgate-[0-9]+$/ {sub("ws://", "", $2); print $2}' "$dir/up.out")
mapfile -t admin < <(awk '$1 ~ /^wsgate-[0-9]+$/ {sub("http://", "", $4); print $4}' "$dir/up.out")
mapfile -t gwpid < <(awk '$1 ~ /^wsgate-[0-9]+$/ {print $6}' "$dir/up.out")
mapfile -t relay < <(awk '$1 ~ /^relay-[0-9]+$/ {print $2}' "$dir/up.out")
mapfile -t relaypid < <(awk '$1 ~ /^relay-[0-9]+$/ {print $4}' "$dir/up.out")

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
tunnels() { curl -s "http://$1/metrics" | awk '$1 == "wsgate_tunnels" {print $2}'; }
split() {
	local s=""
	for r in "${relay[@]}"; do s+="$(curl -s "http://$r/info" | jq .connections) "; done
	echo "$s"
}

# idle N PER_GATEWAY_HOLD: one wsload per gateway in parallel, each with its
# own -source range; reports RSS growth per tunnel of every gateway.
idle() {
	local total=$1 hold=$2 rate=$3 n=${#gw[@]}
	local per=$((total / n)) pids=() before=()
	for i in "${!gw[@]}"; do before[i]=$(rss_kib "${gwpid[i]}"); done
	for i in "${!gw[@]}"; do
		local c=$per
		[ "$i" -eq $((n - 1)) ] && c=$((total - per * (n - 1)))
		"$wsload" idle -url "ws://${gw[i]}/room/byhand$i-r%d" -n "$c" -rate "$rate" -hold "$hold" \
			-source "127.0.$((10 + i)).1-127.0.$((10 + i)).8" \
			-threshold "connected==$c" -threshold 'dropped==0' -threshold 'failed==0' \
			-json >"$dir/idle-$i.json" 2>"$dir/idle-$i.log" &
		pids+=($!)
	done
	local open=0
	for _ in $(seq 1 600); do
		open=0
		for a in "${admin[@]}"; do open=$((open + $(tunnels "$a"))); done
		[ "$open" -ge "$total" ] && break
		sleep 0.5
	done
	echo "open tunnels: $open of $total; connections per relay: $(split)"
	sleep 5
	for i in "${!gw[@]}"; do
		local after
		after=$(rss_kib "${gwpid[i]}")
		echo "wsgate-$((i + 1)): RSS ${before[i]} KiB -> $after KiB, $(((after - before[i]) * 1024 / $(tunnels "${admin[i]}"))) bytes per tunnel"
	done
	local fail=0
	for p in "${pids[@]}"; do wait "$p" || fail=1; done
	echo "open tunnels after wsload closed them (0 = every one released): $(for a in "${admin[@]}"; do tunnels "$a"; done | paste -sd+ | bc)"
	jq -s '{connected: (map(.connected) | add), failed: (map(.failed) | add), dropped: (map(.dropped) | add),
		held: (map(.held) | add), wsload_rss_per_conn_bytes: (map(.rss_per_conn_bytes) | add / length | floor),
		passed: (map(.passed) | all)}' "$dir"/idle-*.json
	return $fail
}

# chaos SCENARIO ARGS...: relay.v1 fanout of 300 clients through gateway 1.
chaos() {
	local scenario=$1
	shift
	"$wsload" "$scenario" -url "ws://${gw[0]}/room/byhand-$what-r%d" -rooms 50 -members 6 -rate 2 \
		-duration 20s -after 5s -window 1s -give-up 30s -settle 10s "$@" \
		-threshold 'lost_writes==0' -threshold 'gaps==0' -threshold 'dup_offsets==0' -threshold 'not_back==0' \
		-json >"$dir/$what.json" 2>"$dir/$what.log" || fail=1
	cat "$dir/$what.log"
	jq '{connected, acked, resent, lost_writes, duplicates, duplicates_resent, gaps, dup_offsets, resyncs,
		close_codes, back, not_back, reconnect_ms: (.reconnect_ms | del(.hist)), delivered, passed}' "$dir/$what.json"
	echo "connections per relay after the run (0 = every count released): $(split)"
	return ${fail:-0}
}

status=0
case $what in
idle9000) idle 9000 5m 1000 || status=1 ;;
idle50000) idle 50000 60s 250 || status=1 ;;
drain) chaos drain -drain-url "http://${admin[0]}/api/pools/relay/nodes/${relay[0]}/drain?migrate=1" || status=1 ;;
drain-term) chaos drain -kill-pid "${relaypid[0]}" -signal TERM || status=1 ;;
kill) chaos kill -kill-pid "${relaypid[0]}" -signal KILL || status=1 ;;
esac
echo "raw reports and logs: $dir"
exit $status
