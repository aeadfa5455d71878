#!/usr/bin/env bash
# Handshake latency with and without a /metrics scraper, by hand (not run
# in CI; figure in docs/benchmarks.md):
#
#   bench/scrape-p99.sh [TUNNELS] [REPS]          (default 9000 3)
#
# Starts a redis-server, two relay-backend processes sharing it and one
# wsgate in front of them. wsload idle holds TUNNELS tunnels through the
# gateway; then, REPS times, wsload churn (c=10, 10 s: connect, upgrade,
# one echo, close) runs once alone and once while a loop scrapes the
# admin listener's /metrics 10 times a second, in alternating order. It
# prints each run's handshake p50/p99 and the medians of both. A scrape
# reads the registry's totals; it must not slow a handshake, whatever the
# number of tunnels. Everything it started is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

tunnels=${1:-9000}
reps=${2:-3}
dir=$(mktemp -d /tmp/wsgate-scrape-XXXXXX)
. bench/lib.sh
stack_init
start_relays 2
gw=127.0.0.1:$(free)
admin=127.0.0.1:$(free)
cat >"$dir/wsgate.toml" <<EOF
[gateway]
listen = "$gw"
[admin]
listen = "$admin"
[[pools]]
name = "relay"
  [[pools.nodes]]
  addr = "${relays[0]}"
  [[pools.nodes]]
  addr = "${relays[1]}"
[[routes]]
path_prefix = "/room/"
pool = "relay"
EOF
start_gateway

live() { curl -sf "http://$admin/metrics" | awk '$1 == "wsgate_tunnels" { print $2 }'; }
hold=$((60 + reps * 30))
"$dir/wsload" idle -url "ws://$gw/room/r%d" -n "$tunnels" -rate 3000 -hold "${hold}s" >"$dir/idle.txt" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
	[ "$(live)" = "$tunnels" ] && break
	sleep 0.2
done
echo "tunnels held: $(live)"

churn() { # $1: label; prints "label p50 p99"
	"$dir/wsload" churn -url "ws://$gw/room/c%d" -c 10 -duration 10s -json 2>/dev/null |
		python3 -c 'import json,sys; r=json.load(sys.stdin); c=r["connect_ms"]; print(sys.argv[1], c["p50"], c["p99"], int(r["handshakes_per_sec"]))' "$1"
}
scraped() {
	(for _ in $(seq 1 150); do curl -sf "http://$admin/metrics" >/dev/null; sleep 0.1; done) &
	local sp=$!
	churn scraped
	kill "$sp" 2>/dev/null || true
	wait "$sp" 2>/dev/null || true
}
: >"$dir/runs.txt"
for i in $(seq 1 "$reps"); do
	if [ $((i % 2)) = 1 ]; then
		churn alone | tee -a "$dir/runs.txt"
		scraped | tee -a "$dir/runs.txt"
	else
		scraped | tee -a "$dir/runs.txt"
		churn alone | tee -a "$dir/runs.txt"
	fi
done
echo "tunnels held at the end: $(live)"
python3 - "$dir/runs.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    label, p50, p99, hs = line.split()
    runs.setdefault(label, []).append((float(p50), float(p99), int(hs)))
for label in ("alone", "scraped"):
    r = runs.get(label, [])
    if r:
        print(f"{label:8} median p50 {statistics.median(x[0] for x in r):.2f} ms  p99 {statistics.median(x[1] for x in r):.2f} ms  "
              f"handshakes/s {statistics.median(x[2] for x in r):.0f}  ({len(r)} runs)")
EOF
