#!/usr/bin/env bash
# The reconnect-storm measurement of docs/benchmarks.md (not run in CI):
#
#   bench/storm.sh [CLIENTS [RATE [BURST]]]   (defaults 4000, 250, 250)
#
# Four runs, each on a fresh stack from `benchrun -up` (redis-server, two
# relays, one gateway with its defaults and the shipped GODEBUG, and for
# the peers' runs nginx and HAProxy as make bench configures them, all on
# 127.0.0.1), through: wsgate; wsgate with [pools.admission]; nginx;
# HAProxy (a peer not installed is skipped). CLIENTS relay.v1 clients (2
# per room, one message every 10 s each) connect through the proxy, about
# half on each relay; 5 s after they all joined, relay 1 is killed with
# SIGKILL and its clients reconnect (random wait below 1 s, then jittered
# backoff, 100 ms doubling to 2 s, for at most 60 s) through the same
# proxy to relay 2. In the run with admission, once the clients have
# joined and before the kill, the gateway's config gets the pool's
# [pools.admission] RATE and BURST and is reloaded, so that only the storm
# is limited. A sampler reads, every 100 ms, the proxy's CPU time
# (utime+stime from /proc of its PIDs: nginx = master + worker) and relay
# 2's /info connections and CPU time. Each run reports wsload's clients
# back, the last one's time back counted from the kill (back_all_ms) and
# lost writes; the proxy's peak CPU over any one second from the kill
# until the last client was back (at least one second) and its CPU-seconds
# over that span; and relay 2's peak handshakes per second (connections
# gained over one second, closes there being nil) and peak CPU. A table of
# the four runs ends the output.
set -euo pipefail
cd "$(dirname "$0")/.."

clients=${1:-4000} rate=${2:-250} burst=${3:-$rate}
rooms=$((clients / 2))
dir=$(mktemp -d /tmp/wsgate-storm-XXXXXX)
go build -o "$dir/benchrun" ./bench/cmd/benchrun
tck=$(getconf CLK_TCK)
after=5s giveup=60s

up="" sampler="" load=""
stop() {
	if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
	if [ -n "$load" ]; then kill -TERM "$load" 2>/dev/null || true; fi
	if [ -n "$up" ]; then
		kill -TERM "$up" 2>/dev/null || true
		wait "$up" 2>/dev/null || true
	fi
	up="" sampler="" load=""
}
trap stop EXIT

# installed KIND: nginx or haproxy is in PATH or /usr/sbin.
installed() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

# ticks PID...: their utime+stime in clock ticks.
ticks() { local p c=0; for p in "$@"; do c=$((c + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo "$c"; }

# sample R2PID R2ADDR OUT PID...: every 100 ms while relay 2 lives,
# "time_ms proxy_ticks relay2_connections relay2_ticks".
sample() {
	local r2pid=$1 r2=$2 out=$3
	shift 3
	while kill -0 "$r2pid" 2>/dev/null; do
		local t c p r
		t=$(date +%s%3N)
		p=$(ticks "$@")
		c=$(curl -s --max-time 1 "http://$r2/info" | jq -r '.connections // empty' 2>/dev/null || true)
		r=$(ticks "$r2pid")
		[ -n "$c" ] && echo "$t $p $c $r" >>"$out"
		sleep 0.1
	done
}

# joined R1 R2 N: waits (60 s at most) until the relays hold N clients.
joined() {
	local i n a x
	for i in $(seq 1 600); do
		n=0
		for a in "$1" "$2"; do
			x=$(curl -s --max-time 1 "http://$a/info" | jq -r '.connections // 0' 2>/dev/null || true)
			n=$((n + ${x:-0}))
		done
		[ "$n" -ge "$3" ] && return 0
		sleep 0.1
	done
	echo "only $n of $3 clients joined" >&2
	return 1
}

summary=()

# one NAME: wsgate, admission, nginx or haproxy.
one() {
	local name=$1 d="$dir/$1" peers=()
	mkdir -p "$d"
	case $name in nginx | haproxy) peers=(-peers) ;; esac
	"$dir/benchrun" -up -relays 2 -gateways 1 "${peers[@]}" -dir "$d" >"$d/up.out" 2>"$d/up.err" &
	up=$!
	for _ in $(seq 1 600); do
		grep -q '^running;' "$d/up.out" && break
		kill -0 "$up" 2>/dev/null || { cat "$d/up.err"; exit 1; }
		sleep 0.2
	done
	local wsload addr admin cfg r1 r1pid r2 r2pid pids=()
	wsload=$(awk '$1 == "wsload" {print $2}' "$d/up.out")
	admin=$(awk '$1 == "wsgate-1" {sub("http://", "", $4); print $4}' "$d/up.out")
	r1=$(awk '$1 == "relay-1" {print $2}' "$d/up.out")
	r1pid=$(awk '$1 == "relay-1" {print $4}' "$d/up.out")
	r2=$(awk '$1 == "relay-2" {print $2}' "$d/up.out")
	r2pid=$(awk '$1 == "relay-2" {print $4}' "$d/up.out")
	cfg="$d/wsgate-1.toml"
	case $name in
	wsgate | admission)
		addr=$(awk '$1 == "wsgate-1" {sub("ws://", "", $2); print $2}' "$d/up.out")
		pids=("$(awk '$1 == "wsgate-1" {print $6}' "$d/up.out")")
		;;
	*)
		# "NAME ws://ADDR pids PID[,PID] config PATH"
		addr=$(awk -v n="$name" '$1 == n {sub("ws://", "", $2); print $2}' "$d/up.out")
		IFS=, read -r -a pids <<<"$(awk -v n="$name" '$1 == n {print $4}' "$d/up.out")"
		;;
	esac
	sample "$r2pid" "$r2" "$d/samples" "${pids[@]}" &
	sampler=$!
	"$wsload" kill -url "ws://$addr/room/storm-r%d" -rooms "$rooms" -members 2 -rate 0.1 -connect-rate 1000 \
		-duration 30s -after "$after" -window 1s -give-up "$giveup" -settle 10s \
		-kill-cmd "date +%s%3N >$d/killed_at && kill -KILL $r1pid" \
		-threshold 'not_back==0' -json >"$d/wsload.json" 2>"$d/wsload.log" &
	load=$!
	joined "$r1" "$r2" "$clients"
	if [ "$name" = admission ]; then
		# Before the kill, $after after the clients joined.
		awk -v r="$rate" -v b="$burst" '/^  \[\[pools.nodes\]\]/ && !done {print "  [pools.admission]\n  rate = " r "\n  burst = " b; done = 1} {print}' "$cfg" >"$d/admission.toml"
		cp "$d/admission.toml" "$cfg"
		curl -s -X POST -H 'X-Wsgate-Admin: 1' "http://$admin/api/reload" >"$d/reload.json"
		jq -e .ok "$d/reload.json" >/dev/null || { echo "reload failed: $(cat "$d/reload.json")" >&2; exit 1; }
		[ ! -e "$d/killed_at" ] || { echo "the admission rate was set after the kill" >&2; exit 1; }
	fi
	wait "$load" || true
	load=""
	kill "$sampler" 2>/dev/null || true
	wait "$sampler" 2>/dev/null || true
	sampler=""
	local back_all not_back line
	back_all=$(jq -r '.back_all_ms' "$d/wsload.json")
	not_back=$(jq -r '.not_back' "$d/wsload.json")
	# From the kill to the last client back (to the give-up when one was
	# not back): the proxy's CPU-seconds and its peak over one second (the
	# first second at least; each window from a sample to the latest one at
	# least 1 s before it), and relay 2's peak handshakes/s and CPU over the
	# same windows.
	line=$(awk -v tck="$tck" -v name="$name" -v k="$(cat "$d/killed_at")" -v back="$back_all" -v nb="$not_back" -v giveup="${giveup%s}" '
		BEGIN { end = (nb == 0 && back > 0) ? k + back : k + giveup * 1000; pend = end < k + 1000 ? k + 1000 : end }
		$1 < k { b = $1; bp = $2 }
		$1 >= k { n++; t[n] = $1; p[n] = $2; c[n] = $3; u[n] = $4; if ($1 >= end && !e) e = n; if ($1 >= pend && !pe) pe = n }
		END {
			if (!e) e = n; if (!pe) pe = n
			# the last sample before the kill starts the span
			t[0] = b; p[0] = bp; c[0] = c[1]; u[0] = u[1]
			j = 0; peak = 0; hs = 0; rcpu = 0
			for (i = 1; i <= pe; i++) {
				# the window: from the latest sample at least 1 s before
				while (j + 1 < i && t[i] - t[j + 1] >= 1000) j++
				if (t[i] - t[j] < 1000) continue
				x = (p[i] - p[j]) / tck * 1000 / (t[i] - t[j]) * 100; if (x > peak) peak = x
				x = (c[i] - c[j]) * 1000 / (t[i] - t[j]); if (x > hs) hs = x
				x = (u[i] - u[j]) / tck * 1000 / (t[i] - t[j]) * 100; if (x > rcpu) rcpu = x
			}
			printf "%s|%.0f|%.2f|%.0f|%.0f", name, peak, (p[e] - p[0]) / tck, hs, rcpu
		}' "$d/samples")
	local peak cpus hs rcpu
	IFS='|' read -r _ peak cpus hs rcpu <<<"$line"
	echo "$name: proxy peak CPU ${peak}% of a core over 1 s, ${cpus} CPU-s from the kill to the last client back; relay 2: peak ${hs} handshakes/s, peak CPU ${rcpu}%"
	jq -c '{connected, back, not_back, back_all_ms, tries, reconnect_ms: (.reconnect_ms | {p50, p99, max}), close_codes, failed_by, lost_writes, passed}' "$d/wsload.json"
	summary+=("$(jq -r --arg n "$name" --arg peak "$peak" --arg cpus "$cpus" --arg hs "$hs" \
		'"| \($n) | \(if .not_back == 0 then (.back_all_ms / 1000 * 100 | round / 100 | tostring) else "\(.not_back) not back" end) | \(.back) / \(.not_back) | \(.lost_writes) | \($peak) | \($cpus) | \($hs) |"' "$d/wsload.json")")
	stop
}

for name in wsgate admission nginx haproxy; do
	case $name in
	nginx | haproxy)
		if ! installed "$name"; then
			echo "$name: not installed, skipped (apt-get install -y $([ "$name" = nginx ] && echo nginx-light || echo haproxy))"
			continue
		fi
		;;
	esac
	one "$name"
done
echo
echo "$clients clients, relay 1 killed; admission = wsgate with [pools.admission] rate = $rate, burst = $burst"
echo "| proxy | last client back (s) | back / not back | lost writes | proxy peak CPU (% of a core, 1 s) | proxy CPU-s, kill to last back | relay 2 peak handshakes/s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${summary[@]}"
echo "raw samples and reports in $dir"
