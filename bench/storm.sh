#!/usr/bin/env bash
# The reconnect-storm measurement of docs/benchmarks.md (not run in CI):
#
#   bench/storm.sh [CLIENTS [RATE [BURST]]]   (defaults 4000, 250, 250)
#
# Twice, each time on a fresh stack from `benchrun -up` (redis-server, two
# relays, one gateway on 127.0.0.1): CLIENTS relay.v1 clients (2 per room,
# one message every 10 s each) connect through the gateway; 10 s later
# relay 1 is killed with SIGKILL and its clients reconnect (random wait
# below 1 s, then jittered backoff, for at most 90 s) to relay 2. The first
# run has no admission rate; in the second, the same command that kills
# relay 1 first sets the pool's [pools.admission] rate and burst (edits
# the gateway's config and reloads it), so the clients' first connections
# are not limited, only the storm. A
# sampler reads relay 2's /info connections and its CPU time from /proc
# every 100 ms; the report is the peak of connections gained over any one
# second (handshakes/s on the surviving relay, closes there being nil),
# the peak CPU over any one second, its CPU-seconds over the run, and
# wsload's count of clients back and the slowest one's time back.
set -euo pipefail
cd "$(dirname "$0")/.."

clients=${1:-4000} rate=${2:-250} burst=${3:-$rate}
rooms=$((clients / 2))
dir=$(mktemp -d /tmp/wsgate-storm-XXXXXX)
go build -o "$dir/benchrun" ./bench/cmd/benchrun
tck=$(getconf CLK_TCK)

up="" load="" sampler=""
stop() {
	if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
	if [ -n "$load" ]; then kill -TERM "$load" 2>/dev/null || true; fi
	if [ -n "$up" ]; then
		kill -TERM "$up" 2>/dev/null || true
		wait "$up" 2>/dev/null || true
	fi
	up="" load="" sampler=""
}
trap stop EXIT

# sample PID ADDR OUT: every 100 ms, "time_ms connections cpu_ticks".
sample() {
	local pid=$1 addr=$2 out=$3
	while kill -0 "$pid" 2>/dev/null; do
		local t c cpu
		t=$(date +%s%3N)
		c=$(curl -s --max-time 1 "http://$addr/info" | jq -r '.connections // empty' 2>/dev/null || true)
		cpu=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo "")
		[ -n "$c" ] && [ -n "$cpu" ] && echo "$t $c $cpu" >>"$out"
		sleep 0.1
	done
}

# one NAME ADMISSION(0|1)
one() {
	local name=$1 admit=$2 d="$dir/$1"
	mkdir -p "$d"
	"$dir/benchrun" -up -relays 2 -gateways 1 -dir "$d" >"$d/up.out" 2>"$d/up.err" &
	up=$!
	for _ in $(seq 1 600); do
		grep -q '^running;' "$d/up.out" && break
		kill -0 "$up" 2>/dev/null || { cat "$d/up.err"; exit 1; }
		sleep 0.2
	done
	local wsload gw admin cfg r1pid r2 r2pid
	wsload=$(awk '$1 == "wsload" {print $2}' "$d/up.out")
	gw=$(awk '$1 == "wsgate-1" {sub("ws://", "", $2); print $2}' "$d/up.out")
	admin=$(awk '$1 == "wsgate-1" {sub("http://", "", $4); print $4}' "$d/up.out")
	r1pid=$(awk '$1 == "relay-1" {print $4}' "$d/up.out")
	r2=$(awk '$1 == "relay-2" {print $2}' "$d/up.out")
	r2pid=$(awk '$1 == "relay-2" {print $4}' "$d/up.out")
	cfg="$d/wsgate-1.toml"
	local kill="date +%s%3N >$d/killed_at && kill -KILL $r1pid"
	if [ "$admit" = 1 ]; then
		awk -v r="$rate" -v b="$burst" '/^  \[\[pools.nodes\]\]/ && !done {print "  [pools.admission]\n  rate = " r "\n  burst = " b; done = 1} {print}' "$cfg" >"$d/admission.toml"
		kill="cp $d/admission.toml $cfg && curl -s -X POST -H 'X-Wsgate-Admin: 1' http://$admin/api/reload >$d/reload.json && $kill"
	fi
	sample "$r2pid" "$r2" "$d/relay2.samples" &
	sampler=$!
	set +e
	"$wsload" kill -url "ws://$gw/room/storm-r%d" -rooms "$rooms" -members 2 -rate 0.1 -connect-rate 1000 \
		-duration 60s -after 10s -window 1s -give-up 90s -settle 10s -kill-cmd "$kill" \
		-threshold 'not_back==0' -json >"$d/wsload.json" 2>"$d/wsload.log"
	set -e
	if [ "$admit" = 1 ]; then
		jq -e .ok "$d/reload.json" >/dev/null || { echo "reload failed: $(cat "$d/reload.json")" >&2; exit 1; }
	fi
	kill "$sampler" 2>/dev/null || true
	wait "$sampler" 2>/dev/null || true
	sampler=""
	local handshakes
	handshakes=$(curl -s "http://$admin/metrics" | awk '/^wsgate_handshakes_total\{result="(ok|admission|no_capacity|upstream_error)"\}/ {printf "%s ", $0}')
	# From the kill on: the 1 s windows between samples, and the CPU time
	# over the 20 s after the kill; for reference, the CPU over the 5 s
	# before it.
	awk -v tck="$tck" -v name="$name" -v k="$(cat "$d/killed_at")" '
		$1 >= k - 5000 && $1 < k { if (!b0) { b0 = $1; bu0 = $3 } b1 = $1; bu1 = $3 }
		$1 >= k - 100 { n++; t[n] = $1; c[n] = $2; u[n] = $3 }
		END {
			j = 1; peak = 0; cpu = 0; top = 0; e = 1
			for (i = 1; i <= n; i++) {
				if (c[i] > top) top = c[i]
				if (t[i] - t[1] <= 20000) e = i
				while (t[i] - t[j] > 1000) j++
				if (t[i] - t[j] >= 900) {
					r = (c[i] - c[j]) * 1000 / (t[i] - t[j]); if (r > peak) peak = r
					p = (u[i] - u[j]) / tck * 1000 / (t[i] - t[j]) * 100; if (p > cpu) cpu = p
				}
			}
			printf "%s: relay 2 after the kill: peak %.0f handshakes/s (connections gained in 1 s), peak CPU %.0f%% of a core over 1 s (%.0f%% before the kill), %.2f CPU-s in the 20 s after the kill, %d connections at most\n", name, peak, cpu, (bu1 - bu0) / tck * 1000 / (b1 - b0) * 100, (u[e] - u[1]) / tck, top
		}' "$d/relay2.samples"
	jq -c '{connected, back, not_back, tries, reconnect_ms: (.reconnect_ms | {p50, p99, max}), close_codes, failed_by, lost_writes, passed}' "$d/wsload.json"
	echo "gateway: $handshakes"
	stop
}

one without 0
one with 1
echo "raw samples and reports in $dir"
