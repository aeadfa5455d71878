#!/usr/bin/env bash
# The by-hand load measurements of docs/benchmarks.md (not run in CI):
#
#   bench/byhand.sh idle9000     9,000 idle through one gateway to two relays, 10-minute hold
#   bench/byhand.sh idle50000    50,000 idle through six gateways to five relays, 60s hold
#                                (BENCH_HOLD=10m: hold them longer)
#   bench/byhand.sh drain        relay.v1 fanout through the gateway, relay 1 drained by the admin API
#   bench/byhand.sh drain-term   the same, relay 1 drained by SIGTERM (its own 1001 drain)
#   bench/byhand.sh kill         the same, relay 1 killed with SIGKILL
#   bench/byhand.sh profile      make bench's 12,000 frames/s fanout through one gateway:
#                                syscalls per forwarded frame (perf stat) and a CPU profile
#                                (needs perf as root; PROFILE_STRACE=1 or no perf: strace -c);
#                                BENCH_TARGET=nginx|haproxy: the same through that peer instead
#   bench/byhand.sh churn        make bench's churn through one gateway: the gateway's CPU,
#                                syscalls (strace -c) and context switches per handshake, and
#                                a perf profile if it can; BENCH_TARGET=nginx|haproxy: the same
#                                through that peer (no profile: their binaries are stripped)
#   bench/byhand.sh frozen       one room of 100 through one gateway whose pool reaches one
#                                relay over ONE HTTP/2 connection, one member never reading:
#                                the other 99's delivery and p50/p99 against the same 99
#                                without it, and what ended the frozen one's tunnel
#
# Each starts `benchrun -up` (redis-server, relays and gateways on 127.0.0.1,
# stopped by benchrun's PID at the end), runs wsload against it and prints
# wsload's table, the gateway's RSS per connection where it applies, and
# where the raw reports are. Exit status 1 when a wsload threshold failed.
# BENCH_ENGINE=goroutines runs the gateways on the goroutine tunnel engine
# (gateway.tunnel_engine), to compare with the default, epoll; BENCH_POLLERS=N
# sets the gateways' gateway.pollers (default: the gateway's own);
# BENCH_PROTOCOL=h2 makes the gateways reach the relays over HTTP/2
# (pools.protocol), BENCH_H2_CONNECTIONS=N on N connections per relay
# (pools.h2_connections; frozen: h2 on 1 unless set). BENCH_GW_ENV='KEY=value ...' adds to the gateways'
# environment (a GODEBUG or GOGC to measure).
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
case $what in
idle9000) relays=2 gateways=1 ;;
idle50000) relays=5 gateways=6 ;;
drain | drain-term | kill) relays=3 gateways=1 ;;
profile | churn) relays=2 gateways=1 ;;
frozen)
	# One relay, and its pool over HTTP/2 on one connection, so that every
	# client's stream shares it (BENCH_PROTOCOL=http1 runs the same over a
	# socket per client, to compare).
	relays=1 gateways=1
	BENCH_PROTOCOL=${BENCH_PROTOCOL:-h2} BENCH_H2_CONNECTIONS=${BENCH_H2_CONNECTIONS:-1}
	;;
*)
	sed -n '2,22p' "$0"
	exit 2
	;;
esac
# BENCH_TARGET: what profile measures, wsgate (the default) or one of the
# peers make bench compares it with, started by benchrun -up -peers with
# make bench's configs.
target=${BENCH_TARGET:-wsgate}
peers=()
case $target in
wsgate) ;;
nginx | haproxy)
	case $what in profile | churn) ;; *) echo "BENCH_TARGET=$target goes with profile or churn only" >&2; exit 2 ;; esac
	peers=(-peers)
	;;
*)
	echo "BENCH_TARGET must be wsgate, nginx or haproxy, not $target" >&2
	exit 2
	;;
esac

# BENCH_GW_ENV: KEY=value words added to the gateways' environment.
gwenv=()
read -r -a kvs <<<"${BENCH_GW_ENV:-}"
for kv in "${kvs[@]}"; do gwenv+=(-gateway-env "$kv"); done

dir=$(mktemp -d /tmp/wsgate-byhand-XXXXXX)
go build -o "$dir/benchrun" ./bench/cmd/benchrun
"$dir/benchrun" -up -relays "$relays" -gateways "$gateways" -engine "${BENCH_ENGINE:-}" -pollers "${BENCH_POLLERS:-0}" -protocol "${BENCH_PROTOCOL:-}" -h2-connections "${BENCH_H2_CONNECTIONS:-0}" "${peers[@]}" "${gwenv[@]}" -dir "$dir" >"$dir/up.out" 2>"$dir/up.err" &
up=$!
load="" perfpid=""
stop() {
	if [ -n "$perfpid" ]; then kill -INT "$perfpid" 2>/dev/null || true; fi
	if [ -n "$load" ]; then kill -TERM "$load" 2>/dev/null || true; fi
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
# The peer's line: "NAME ws://ADDR pids PID[,PID] config PATH", the PID
# that proxies last (nginx: master, then worker).
peer="" peerpids=""
if [ "$target" != wsgate ]; then
	peer=$(awk -v t="$target" '$1 == t {sub("ws://", "", $2); print $2}' "$dir/up.out")
	peerpids=$(awk -v t="$target" '$1 == t {print $4}' "$dir/up.out")
	if [ -z "$peer" ] || [ -z "$peerpids" ]; then
		echo "benchrun printed no $target line" >&2
		exit 1
	fi
fi

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

# profile: make bench's fixed fanout (benchrun's fullPlan: 50 rooms × 10
# members, 64 B, 2.4 msg/s each = 12,000 frames/s) through gateway 1, and
# four windows of $win seconds on the gateway's PID while it runs: nothing
# attached (CPU per frame); perf stat of six syscalls; perf record of the
# read/write tracepoints, whose fds say the side and so the direction; perf
# record -g of where the CPU goes. Each window's frames are the gateway's
# wsgate_frames_total read right after perf acknowledged enabling its
# events and right before disabling them (perf --control), so perf's own
# start and exit are outside the window. Every file of this mode goes to
# $pdir, a subdirectory: the gateway watches its config's directory, $dir,
# and a file written there during a window would wake it (inotify).
#
# BENCH_TARGET=nginx or haproxy takes the same windows on that peer: the
# fanout goes through it, perf attaches to the PID that proxies (nginx's
# worker, HAProxy's one process), the CPU is all its PIDs' (nginx: master
# + worker), window 2 counts every syscalls:sys_enter_* tracepoint (the
# peers use recvfrom and sendto, not read and write), window 3 records the
# read-like and write-like calls, and window 4 groups the samples by the
# syscall at the kernel entry (cgroups). A peer counts no frames: they come
# from its client sockets' byte counters (ss -ti), the fanout's frames
# being of fixed size.
win=10
taddr=${peer:-${gw[0]}} # where the fanout connects
frames() { # frames forwarded so far: "TO_NODE TO_CLIENT"
	if [ -n "$peer" ]; then
		# Bytes received on the peer's client sockets over 70 (a masked
		# frame: 2-byte header, 4-byte mask, 64 B payload), bytes sent and
		# acknowledged over 66 (unmasked); through wsgate these agree with
		# its wsgate_frames_total to 0.01%.
		ss -tinH state established "( sport = :${peer##*:} )" | awk '
			{ for (i = 1; i <= NF; i++) {
				if ($i ~ /^bytes_received:/) r += substr($i, 16)
				if ($i ~ /^bytes_acked:/) a += substr($i, 13)
			} }
			END {printf "%.0f %.0f\n", r / 70, a / 66}'
		return
	fi
	curl -s "http://${admin[0]}/metrics" | awk '
		$1 == "wsgate_frames_total{direction=\"to_node\"}" {n = $2}
		$1 == "wsgate_frames_total{direction=\"to_client\"}" {c = $2}
		END {printf "%.0f %.0f\n", n, c}'
}
cpu_ticks() { # utime+stime of PIDs, in clock ticks
	local t=0 p
	for p in "$@"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
	echo "$t"
}
# sides PID: "FD client|node" for each TCP socket of PID that is a tunnel's
# client side (local port = the gateway's, or the peer's) or node side
# (remote port = a relay's; the relays' health probes use those ports too,
# but seldom).
sides() {
	local gwport=${taddr##*:} rports=""
	for r in "${relay[@]}"; do rports+="${r##*:} "; done
	find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -printf '%f %l\n' 2>/dev/null |
		awk -v gp="$gwport" -v rp="$rports" '
			function port(a, i, v) {
				sub(/.*:/, "", a)
				for (i = 1; i <= length(a); i++) v = v * 16 + index("0123456789ABCDEF", toupper(substr(a, i, 1))) - 1
				return v
			}
			FILENAME == "-" { if ($2 ~ /^socket:\[[0-9]+\]$/) fd[substr($2, 9, length($2) - 9)] = $1; next }
			FNR > 1 && ($10 in fd) {
				if (port($2) == gp) print fd[$10], "client"
				else if (index(" " rp, " " port($3) " ")) print fd[$10], "node"
			}' - /proc/net/tcp /proc/net/tcp6
}
# socket_counts TO_NODE TO_CLIENT ALL: window 3's sockets per side and
# frames.
socket_counts() {
	echo "  $(awk '$2 == "client"' "$pdir/sides.txt" | wc -l) client sockets, $(awk '$2 == "node"' "$pdir/sides.txt" | wc -l) node sockets; $1 frames to_node + $2 to_client = $3"
}
# cpu_window SORT: window 4, perf record -g on gpid, and perf report's top
# functions by self samples sorted by SORT; the samples' call chains in
# $pdir/perf-cpu.stacks, the window's frames in n, c, a.
cpu_window() {
	perf_window record -q -F 999 -g -o "$pdir/perf-cpu.data"
	read -r n c a < <(span)
	perf report -i "$pdir/perf-cpu.data" --stdio --no-children --sort "$1" -g none >"$pdir/perf-cpu.txt" 2>/dev/null
	perf script -i "$pdir/perf-cpu.data" -F ip,sym >"$pdir/perf-cpu.stacks" 2>/dev/null
	echo
	echo "window 4, perf record -F 999 -g -p $gpid ($(perf evlist -i "$pdir/perf-cpu.data" 2>/dev/null | head -1) events): $a frames, $(awk 'BEGIN {RS = ""} END {print NR}' "$pdir/perf-cpu.stacks") samples"
	echo "  top functions by self samples (perf report --no-children --sort $1):"
	grep -v '^#' "$pdir/perf-cpu.txt" | grep -v '^$' | head -15 | sed 's/^/  /'
}
# rw_by_side: "CALL SIDE COUNT" for the calls window 3 recorded in
# $pdir/perf-rw.data, each call's fd put on its side (client, node, other)
# by $pdir/sides.txt.
rw_by_side() {
	perf script -i "$pdir/perf-rw.data" -F event,trace 2>/dev/null |
		awk '
			function hex(a, i, v) {
				sub(/^0x/, "", a)
				for (i = 1; i <= length(a); i++) v = v * 16 + index("0123456789abcdef", tolower(substr(a, i, 1))) - 1
				return v
			}
			FILENAME != "-" { side[$1] = $2; next }
			{ call = $1; sub(/^syscalls:sys_enter_/, "", call); sub(/:$/, "", call)
			  fd = $3; sub(/,$/, "", fd); fd = hex(fd); s = (fd in side) ? side[fd] : "other"
			  k[call " " s]++ }
			END { for (x in k) print x, k[x] }' "$pdir/sides.txt" -
}
# perf_window ARGS...: runs `perf ARGS -p GATEWAY` with its events disabled,
# enables them through a control fifo for $win seconds and sets f0 and f1 to
# the frame counts at the start and the end of that span.
perf_window() {
	local ctl="$pdir/perf.ctl" ack="$pdir/perf.ack"
	rm -f "$ctl" "$ack"
	mkfifo "$ctl" "$ack"
	exec 8<>"$ctl" 9<>"$ack"
	perf "$@" -D -1 --control "fifo:$ctl,$ack" -p "$gpid" 2>>"$pdir/perf.err" &
	perfpid=$!
	echo enable >&8
	read -r -t 60 _ <&9 || { echo "perf did not start (see $pdir/perf.err)" >&2; return 1; }
	f0=$(frames)
	sleep "$win"
	f1=$(frames)
	echo disable >&8
	read -r -t 60 _ <&9 || true
	kill -INT "$perfpid"
	wait "$perfpid" || true
	perfpid=""
	exec 8>&- 9>&-
}
span() { # frames between f0 and f1: "TO_NODE TO_CLIENT ALL"
	echo "$f0 $f1" | awk '{printf "%d %d %d\n", $3 - $1, $4 - $2, $3 - $1 + $4 - $2}'
}
# groups: each perf script sample (a call chain, leaf first) in one group,
# the first rule that matches anywhere in the chain; the kernel part of a
# syscall counts with the syscall.
groups() {
	awk 'BEGIN { RS = "" }
		{
			g = ""
			if ($0 ~ /runtime\.(gcBgMarkWorker|gcDrain|gcAssistAlloc|bgsweep|bgscavenge|sweepone|markroot|scanobject|gcStart|gcMarkDone|wbBufFlush)/) g = "GC (mark workers, assists, sweep, write barriers)"
			else if ($0 ~ /prometheus|promhttp|expfmt/) g = "metrics (the /metrics scrapes of this window)"
			else if ($0 ~ /do_syscall_64/ && $0 ~ /tunnel\.\(\*half\)\.(writeNB|flushTail)|tunnel\.rawWrite|tunnel\.\(\*poller\)\.writev/) g = "write(2): Go wrapper + kernel"
			else if ($0 ~ /do_syscall_64/ && $0 ~ /tunnel\.\(\*half\)\.readSrc|tunnel\.rawRead/) g = "read(2): Go wrapper + kernel"
			else if ($0 ~ /do_syscall_64/ && $0 ~ /tunnel\.epollWaitNow|tunnel\.\(\*poller\)\.ready/) g = "epoll_pwait of the tunnel pollers (never blocks)"
			else if ($0 ~ /syscall\.read/) g = "read(2): Go wrapper + kernel"
			else if ($0 ~ /syscall\.write|poll\.\(\*FD\)\.Write/) g = "write(2): Go wrapper + kernel"
			else if ($0 ~ /runtime\.netpoll/) g = "netpoll: epoll_pwait"
			else if ($0 ~ /runtime\.futex/) g = "futex: Ms parking and waking (stopm, startm, sysmon wakes)"
			else if ($0 ~ /runtime\.usleep/ && $0 ~ /runtime\.sysmon/) g = "nanosleep: runtime.usleep in sysmon"
			else if ($0 ~ /runtime\.usleep/) g = "nanosleep: other runtime.usleep (work stealing)"
			else if ($0 ~ /runtime\.osyield/) g = "sched_yield (runtime.osyield)"
			else if ($0 ~ /do_syscall_64/) g = "other syscalls"
			else if ($2 ~ /wsframe\./) g = "frame scanning (wsframe.Scanner, where not inlined)"
			else if ($0 ~ /gateway\/internal\/tunnel\./ && $2 !~ /^runtime\./) g = "tunnel Go code outside syscalls: forward (frame scan inlined), send, pollread, poll.FD"
			else if ($2 ~ /^runtime\.(schedule|findRunnable|park_m|gopark|goready|ready|runqget|runqsteal|runqgrab|stealWork|checkTimers|execute|wakep|startm|stopm|mcall|gosched|casgstatus|exitsyscall|entersyscall|reentersyscall|goexit0|newproc|resetspinning|lock2|unlock2|sysmon|retake|netpollready|netpollunblock|injectglist)/ || $0 ~ /runtime\.(schedule|sysmon|findRunnable|park_m)/) g = "Go scheduler (user space)"
			else if ($1 ~ /^ffffffff/) g = "kernel outside syscalls (interrupts, softirqs, faults)"
			else if ($2 ~ /^runtime\./) g = "Go runtime, other (malloc, memmove, timers, ...)"
			else g = "other"
			n[g]++; t++
			if ($1 ~ /^ffffffff/) k[g]++
		}
		END { for (x in n) printf "  %5.1f%%  (%4.1f%% in kernel)  %s\n", 100 * n[x] / t, 100 * k[x] / t, x }' "$1" | sort -rn
}
# cgroups STACKS CPU: groups for a C program (nginx, HAProxy): each sample
# by the syscall it is in, read from the kernel entry (__x64_sys_NAME) or,
# for a sample on the syscall's way out (preemption in
# exit_to_user_mode_loop) with no such frame, from the libc wrapper that
# made it; CPU is window 1's CPU-seconds per million frames, shared out by
# the samples. Then the same samples by syscall name.
cgroups() {
	awk -v cpu="$2" 'BEGIN { RS = "" }
		{
			n = split($0, line, "\n"); call = ""; user = ""
			for (i = 1; i <= n; i++) {
				split(line[i], f, " ")
				if (f[2] ~ /^__(x64|ia32|do)_sys_/) { call = f[2]; sub(/^__(x64|ia32|do)_sys_/, "", call); break }
			}
			if (call == "" && $0 ~ /do_syscall_64|entry_SYSCALL_64/) {
				for (i = 1; i <= n; i++) { split(line[i], f, " "); if (f[1] !~ /^ffffffff/) { user = f[2]; break } }
				call = user
				sub(/^(__GI_)?(__libc_|__)?(vdso_)?/, "", call)
				if (call == "send") call = "sendto"
				if (call == "recv") call = "recvfrom"
				if (call !~ /^[a-z_0-9]+$/) call = "?"
			}
			if (call ~ /^(read|readv|pread64|preadv|recvfrom|recvmsg|recvmmsg)$/) g = "read-like syscalls: read(2), recvfrom(2), ... (their kernel part)"
			else if (call ~ /^(write|writev|pwrite64|pwritev|sendto|sendmsg|sendmmsg|splice)$/) g = "write-like syscalls: write(2), sendto(2), ... (their kernel part)"
			else if (call ~ /^epoll_/) g = "epoll syscalls: epoll_wait, epoll_ctl, ... (their kernel part)"
			else if (call != "") g = "other syscalls (their kernel part)"
			else if ($1 ~ /^ffffffff/) g = "kernel outside syscalls (interrupts, softirqs, faults)"
			else g = "user space (the proxy and libc outside syscalls)"
			if (call == "") call = ($1 ~ /^ffffffff/) ? "(kernel, no syscall)" : "(user space)"
			gn[g]++; cn[call]++; t++
			if ($1 ~ /^ffffffff/) { gk[g]++; ck[call]++ }
		}
		END {
			for (x in gn) printf "1\t  %5.1f%%  (%4.1f%% in kernel)  %5.2f CPU-s per million frames  %s\n", 100 * gn[x] / t, 100 * gk[x] / t, cpu * gn[x] / t, x
			print "2\t  the same samples by syscall:"
			for (x in cn) printf "3\t  %5.1f%%  (%4.1f%% in kernel)  %5.2f CPU-s per million frames  %s\n", 100 * cn[x] / t, 100 * ck[x] / t, cpu * cn[x] / t, x
		}' "$1" | sort -t"$(printf '\t')" -k1,1n -k2,2rn | cut -f2-
}
# peer_perf: windows 2-4 of profile on a peer (gpid, cpm and the frame
# counts are profile's).
peer_perf() {
	local rd=read,readv,recvfrom,recvmsg wr=write,writev,sendto,sendmsg x ex=() evs=()
	for x in ${rd//,/ }; do ex+=(-e "syscalls:sys_exit_$x" --filter 'ret == -11'); done
	perf_window stat -x, -e 'syscalls:sys_enter_*' "${ex[@]}" -o "$pdir/perf-stat.csv"
	read -r n c a < <(span)
	echo
	echo "window 2, perf stat -e 'syscalls:sys_enter_*' -e syscalls:sys_exit_{$rd} --filter 'ret == -11' -p $gpid"
	echo "  $n frames to_node + $c to_client = $a; every syscall made in the window:"
	awk -F, -v a="$a" '$1 ~ /^[0-9]+$/ && $1 > 0 && $3 ~ /^syscalls:sys_enter_/ {sub(/syscalls:sys_enter_/, "", $3)
			printf "  %-15s %9d  %.3f per forwarded frame\n", $3, $1, $1 / a}' "$pdir/perf-stat.csv" | sort -k2,2nr
	awk -F, -v a="$a" '$1 ~ /^[0-9]+$/ && $3 ~ /^syscalls:sys_enter_/ {t += $1}
		$1 ~ /^[0-9]+$/ && $3 ~ /^syscalls:sys_exit_/ {sub(/syscalls:sys_exit_/, "", $3); e = e sprintf(" %s %d (%.3f per frame)", $3, $1, $1 / a)}
		END {printf "  %-15s %9d  %.3f per forwarded frame\n", "all", t, t / a
			printf "  (calls that returned EAGAIN:%s)\n", e}' "$pdir/perf-stat.csv"

	sides "$gpid" >"$pdir/sides.txt"
	for x in ${rd//,/ } ${wr//,/ }; do evs+=("syscalls:sys_enter_$x"); done
	perf_window record -q -e "$(IFS=,; echo "${evs[*]}")" -o "$pdir/perf-rw.data"
	read -r n c a < <(span)
	echo
	echo "window 3, perf record -e syscalls:sys_enter_{$rd,$wr} -p $gpid; the fds' sides from /proc/$gpid/fd and /proc/net/tcp"
	socket_counts "$n" "$c" "$a"
	rw_by_side | awk -v n="$n" -v c="$c" -v calls="$rd,$wr" '
			{ k[$1 " " $2] = $3 }
			END {
				m = split(calls, cl, ",")
				for (i = 1; i <= m; i++) {
					rd = cl[i] ~ /^(read|readv|recvfrom|recvmsg)$/
					if (k[cl[i] " " (rd ? "client" : "node")]) tn = tn sprintf("  %s %.3f", cl[i], k[cl[i] " " (rd ? "client" : "node")] / n)
					if (k[cl[i] " " (rd ? "node" : "client")]) tc = tc sprintf("  %s %.3f", cl[i], k[cl[i] " " (rd ? "node" : "client")] / c)
					if (k[cl[i] " other"]) to = to sprintf("  %s %d", cl[i], k[cl[i] " other"])
				}
				printf "  to_node   (read client socket, write node socket):%s per frame to_node\n", tn
				printf "  to_client (read node socket, write client socket):%s per frame to_client\n", tc
				printf "  on other fds (listeners, the master'"'"'s channel, ...):%s\n", (to == "" ? " none" : to)
			}'

	cpu_window dso,sym
	echo "  samples by the syscall at the kernel entry (bench/byhand.sh cgroups; CPU-s per million frames = share of window 1's $cpm):"
	cgroups "$pdir/perf-cpu.stacks" "$cpm"
}
# joined: the clients the relays hold now, whatever they came through.
joined() {
	local t=0 r
	for r in "${relay[@]}"; do t=$((t + $(curl -s "http://$r/info" | jq .connections))); done
	echo "$t"
}
profile() {
	# gpid: the PID perf attaches to; cpids: the PIDs whose CPU is the target's.
	gpid=${gwpid[0]} pdir="$dir/profile"
	local cpids=("$gpid")
	if [ -n "$peer" ]; then
		IFS=, read -r -a cpids <<<"$peerpids"
		gpid=${cpids[-1]}
	fi
	mkdir -p "$pdir"
	local members=$((50 * 10)) hz n c a f0 f1 c0 c1 cpm
	hz=$(getconf CLK_TCK)
	local perf_ok=1 why=""
	if [ "${PROFILE_STRACE:-}" = 1 ]; then
		perf_ok=0 why="PROFILE_STRACE=1"
	elif ! command -v perf >/dev/null; then
		perf_ok=0 why="perf is not installed"
	elif ! perf list 'syscalls:sys_enter_read' 2>/dev/null | grep -q 'sys_enter_read'; then
		perf_ok=0 why="perf lists no syscalls:* tracepoints (tracefs not mounted, or no permission)"
	elif [ "$(id -u)" -ne 0 ] && [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -gt -1 ]; then
		perf_ok=0 why="not root and kernel.perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid) (tracepoints need -1 or root)"
	fi
	[ $perf_ok -eq 1 ] || echo "perf unusable here: $why; falling back to strace -c -f (it slows the gateway: per-frame ratios only, no profile)"
	# The fanout outlasts the four windows and the time between them (30s
	# to spare; on a loaded machine the gateway's took up to 20s). A peer's
	# windows take longer to set up (window 2 opens every syscall
	# tracepoint) and its frame counts need its sockets open: 10s more.
	local dur=$((4 * win + 30))
	[ -z "$peer" ] || dur=$((4 * win + 40))
	"$wsload" fanout -url "ws://$taddr/room/byhand-profile$$-r%d" -rooms 50 -members 10 -rate 2.4 -size 64 \
		-duration "$dur"s -settle 2s -threshold 'failed==0' -json >"$pdir/profile.json" 2>"$pdir/profile.log" &
	load=$!
	local open=0
	for _ in $(seq 1 300); do
		if [ -n "$peer" ]; then open=$(joined); else open=$(tunnels "${admin[0]}"); fi
		[ "${open:-0}" -ge $members ] && break
		sleep 0.2
	done
	[ "${open:-0}" -ge $members ] || { echo "only ${open:-0} of $members tunnels open after 60s" >&2; return 1; }
	sleep 3 # past the joins and the first second of sends
	if [ -n "$peer" ]; then
		echo "$members clients joined through $target ${taddr} (perf on pid $gpid; CPU of pids ${cpids[*]}); windows of ${win}s each"
		echo "(frames: bytes of the $target's client sockets, ss -ti, over 70 to_node and 66 to_client)"
	else
		echo "$members tunnels open through wsgate-1 (pid $gpid); windows of ${win}s each"
	fi

	c0=$(cpu_ticks "${cpids[@]}")
	f0=$(frames)
	sleep "$win"
	f1=$(frames)
	c1=$(cpu_ticks "${cpids[@]}")
	read -r n c a < <(span)
	echo
	echo "window 1, nothing attached: $n frames to_node + $c to_client = $a in ${win}s ($((a / win)) frames/s)"
	cpm=$(awk -v t=$((c1 - c0)) -v hz="$hz" -v a="$a" 'BEGIN {printf "%.1f", t / hz / a * 1e6}')
	awk -v t=$((c1 - c0)) -v hz="$hz" -v a="$a" -v who="$target" 'BEGIN {printf "  %s CPU (utime+stime): %.2f s = %.1f CPU-seconds per million forwarded frames\n", who, t / hz, t / hz / a * 1e6}'

	if [ $perf_ok -eq 1 ] && [ -n "$peer" ]; then
		peer_perf
	elif [ $perf_ok -eq 1 ]; then
		local ev=syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep
		perf_window stat -x, -e "$ev" -e syscalls:sys_exit_read --filter 'ret == -11' -o "$pdir/perf-stat.csv"
		read -r n c a < <(span)
		echo
		echo "window 2, perf stat -e '$ev' -e syscalls:sys_exit_read --filter 'ret == -11' -p $gpid"
		echo "  $n frames to_node + $c to_client = $a"
		awk -F, -v a="$a" '$3 ~ /^syscalls:sys_enter_/ {sub(/syscalls:sys_enter_/, "", $3); t += $1
			printf "  %-11s %9d  %.3f per forwarded frame\n", $3, $1, $1 / a}
			$3 == "syscalls:sys_exit_read" {eagain = $1}
			END {printf "  %-11s %9d  %.3f per forwarded frame\n", "all six", t, t / a
				printf "  (reads that returned EAGAIN: %d, %.3f per forwarded frame)\n", eagain, eagain / a}' "$pdir/perf-stat.csv"

		sides "$gpid" >"$pdir/sides.txt"
		perf_window record -q -e syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_writev -o "$pdir/perf-rw.data"
		read -r n c a < <(span)
		echo
		echo "window 3, perf record -e syscalls:sys_enter_{read,write,writev} -p $gpid; the fds' sides from /proc/$gpid/fd and /proc/net/tcp"
		socket_counts "$n" "$c" "$a"
		rw_by_side | awk -v n="$n" -v c="$c" '
				{ k[$1 " " $2] = $3 }
				END {
					printf "  to_node   (read client socket, write node socket): read %.3f  write %.3f  writev %.3f per frame to_node\n",
						k["read client"] / n, k["write node"] / n, k["writev node"] / n
					printf "  to_client (read node socket, write client socket): read %.3f  write %.3f  writev %.3f per frame to_client\n",
						k["read node"] / c, k["write client"] / c, k["writev client"] / c
					printf "  on other fds (the runtime eventfd, health probes, admin): read %d  write %d  writev %d\n",
						k["read other"], k["write other"], k["writev other"]
				}'

		cpu_window sym
		echo "  samples by call chain (bench/byhand.sh groups):"
		groups "$pdir/perf-cpu.stacks"
	else
		f0=$(frames)
		timeout -s INT "$win" strace -q -c -f -p "$gpid" -o "$pdir/strace-c.txt" 2>"$pdir/strace.err" || true
		f1=$(frames)
		read -r n c a < <(span)
		echo
		echo "window 2, strace -c -f -p $gpid for ${win}s: $n frames to_node + $c to_client = $a"
		echo "  (strace attaches thread by thread inside the window and slows every syscall, so fewer"
		echo "  syscalls and more batching than without it: rough ratios, not the perf figures)"
		awk -v a="$a" -v all="$peer" '$NF ~ /^(read|write|writev|epoll_pwait|futex|nanosleep)$/ ||
			(all != "" && $4 ~ /^[0-9]+$/ && $NF ~ /^[a-z_0-9]+$/ && $NF != "total") {
			printf "  %-11s %9d  %.3f per forwarded frame\n", $NF, $4, $4 / a}' "$pdir/strace-c.txt"
	fi
	local fail=0
	wait "$load" || fail=1
	load=""
	jq '{connected, sent, received, delivered, failed, latency_ms: (.latency_ms | del(.hist)), passed}' "$pdir/profile.json"
	return $fail
}

# churn: make bench's churn (50 workers: connect, one round trip, close)
# through gateway 1 or the BENCH_TARGET peer, three 5-second runs after a
# 2-second warm-up: the target's utime+stime (/proc/PID/stat, all its PIDs)
# per handshake, and its stime alone (the kernel's share), then one run
# under strace -c -f on the PID that proxies (syscalls per handshake by
# call, strace's slowdown included) and, with perf as root, one under
# perf stat (context switches, all system calls, nanosleep) and, for the
# gateway, one under perf record -g. Files go to $dir/churn.
churn() {
	local cdir=$dir/churn gpid=${gwpid[0]} taddr=${peer:-${gw[0]}} tck fail=0
	# gpid: the PID strace and perf attach to; cpids: the PIDs whose CPU
	# is the target's (nginx: master and worker).
	local cpids=("$gpid")
	if [ -n "$peer" ]; then
		IFS=, read -r -a cpids <<<"$peerpids"
		gpid=${cpids[-1]}
	fi
	mkdir -p "$cdir"
	tck=$(getconf CLK_TCK)
	cpu() { local c=0 p; for p in "${cpids[@]}"; do c=$((c + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $c; }
	sys() { local c=0 p; for p in "${cpids[@]}"; do c=$((c + $(awk '{print $15}' "/proc/$p/stat"))); done; echo $c; }
	run() { # NAME: one churn run, its report in $cdir/NAME.json
		"$wsload" churn -url "ws://$taddr/room/byhand-$1-$$-r%d" -c 50 -duration "${2:-5s}" \
			-threshold 'failed==0' -json >"$cdir/$1.json" 2>"$cdir/$1.log" || fail=1
	}
	run warm 2s
	for i in 1 2 3; do
		local c0 c1 s0 s1
		c0=$(cpu) s0=$(sys)
		run "rep$i"
		c1=$(cpu) s1=$(sys)
		jq -r --arg t "$((c1 - c0))" --arg k "$((s1 - s0))" --arg hz "$tck" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg who "$target" \
			'"run \(input_filename | sub(".*/"; "")): \(.connected) handshakes, \(.handshakes_per_sec | floor)/s, \($who) CPU \(($t | tonumber) / ($hz | tonumber) * 1e6 / .connected | floor) µs per handshake, \(($k | tonumber) / ($hz | tonumber) * 1e6 / .connected | floor) of them in the kernel (load average \($load))"' \
			"$cdir/rep$i.json"
	done
	timeout -s INT 7 strace -q -c -f -p "$gpid" -o "$cdir/strace-c.txt" 2>"$cdir/strace.err" &
	local st=$!
	sleep 1
	run strace
	wait "$st" || true
	local n
	n=$(jq .connected "$cdir/strace.json")
	echo "strace -c -f -p $gpid over one run of $n handshakes, per handshake:"
	awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
		printf "  %-13s %6.2f\n", $NF, $4 / n; t += $4 } END {printf "  %-13s %6.2f\n", "all", t / n}' "$cdir/strace-c.txt"
	if command -v perf >/dev/null && [ "$(id -u)" = 0 ]; then
		# Context switches: each is a thread that went to sleep (or was
		# preempted) and later ran again; nanosleep is the runtime's
		# monitor (sysmon) between its checks.
		perf stat -e context-switches -e raw_syscalls:sys_enter -e syscalls:sys_enter_nanosleep -p "$gpid" -o "$cdir/perf-stat.txt" -- sleep 6 >/dev/null 2>&1 &
		local ps=$!
		sleep 0.5
		run stat
		wait "$ps" || true
		n=$(jq .connected "$cdir/stat.json")
		echo "perf stat -p $gpid over one run of $n handshakes, per handshake (strace's counts above are distorted by strace itself):"
		awk -v n="$n" '$2 == "context-switches" || $2 == "raw_syscalls:sys_enter" || $2 == "syscalls:sys_enter_nanosleep" {gsub(",", "", $1); printf "  %-28s %6.2f\n", $2, $1 / n}' "$cdir/perf-stat.txt"
	fi
	if [ -z "$peer" ] && command -v perf >/dev/null && [ "$(id -u)" = 0 ]; then
		perf record -q -F 999 -g -o "$cdir/perf.data" -p "$gpid" -- sleep 6 >/dev/null 2>&1 &
		local pp=$!
		sleep 0.5
		run perf
		wait "$pp" || true
		perf report -i "$cdir/perf.data" --stdio --children --sort sym -g none 2>/dev/null | grep -v '^#' | grep '%' >"$cdir/perf-children.txt"
		echo "perf record -g: $cdir/perf.data; the handshake path's share of the gateway's samples:"
		grep -E 'gateway\.\(\*Server\)\.(handle|serveUpgrade|dialNode|startTunnel)$|Dialer\)\.DialContext|ResponseHeader\)\.Read$|tunnel\.\(\*poller\)\.loop|runtime\.(sysmon|gcBgMarkWorker)$' \
			"$cdir/perf-children.txt" | sed 's/^/  /'
	fi
	return $fail
}

# frozen: wsload fanout in one room through gateway 1, twice: the 99
# members alone (-members 99), then the same 99 and a 100th that joins and
# never reads its socket again (-members 100 -frozen 1; wsload reads it
# only after the others closed). One room of 100 makes every message a
# fan-out whose frames for the frozen member share the one HTTP/2
# connection with the others': the harsh case. FROZEN_RATE messages per
# second per member (default 1: 99 x 98 = 9,702 frames/s to the readers),
# FROZEN_SIZE bytes each (default 2048: the frozen member's 99 x 2 KiB/s
# fill its socket's receive buffer and the gateway's send buffer toward
# it, which the kernel grows up to net.ipv4.tcp_wmem's 4 MiB, in about
# 20s, and only then reach its HTTP/2 stream's 64 KiB window and the
# relay's queue; at 256 B they never did in 60s), FROZEN_DURATION of
# sends (default 60s). During each run the
# gateway's metrics and the relay's members are sampled every second
# ($dir/frozen/NAME.watch); the lines where a count changed are printed.
frozen() {
	local fdir=$dir/frozen rate=${FROZEN_RATE:-1} size=${FROZEN_SIZE:-2048} dur=${FROZEN_DURATION:-60s} fail=0
	mkdir -p "$fdir"
	local rport=${relay[0]##*:} gport=${gw[0]##*:}
	# sample: one line a second until killed: seconds, open tunnels,
	# the relay's members, the gateway's connections to the relay, their
	# socket queues (h2q: the gateway's end Recv-Q/Send-Q, the relay's
	# end Recv-Q/Send-Q, the most over the connections), the
	# most bytes a client's socket holds unread (Recv-Q) / the gateway's
	# socket to a client holds unacknowledged (Send-Q) / the gateway's
	# socket from a client holds unread (Recv-Q), the frames it
	# forwarded to clients so far (wsgate_frames_total), and
	# the wsgate_tunnels_closed_total and wsgate_closes_total series above 0.
	sample() {
		local t0 now
		t0=$(date +%s.%N)
		echo "started $(date -u -d "@$t0" +%T.%1N) UTC"
		for _ in $(seq 1 1000); do
			now=$(date +%s.%N)
			printf '%5.1fs tunnels %s members %s gw_to_relay_conns %s h2q %s unread %s to_client %s %s\n' "$(echo "$now - $t0" | bc)" \
				"$(tunnels "${admin[0]}")" "$(joined)" \
				"$(ss -tnpH state established "( dport = :$rport )" 2>/dev/null | grep -c "pid=${gwpid[0]},")" \
				"$(ss -tnH state established "( sport = :$rport or dport = :$rport )" | awk -v p=":$rport" '$4 ~ p"$" {if ($1 > gr) gr = $1; if ($2 > gs) gs = $2} $3 ~ p"$" {if ($1 > rr) rr = $1; if ($2 > rs) rs = $2} END {printf "%d/%d,%d/%d", gr, gs, rr, rs}')" \
				"$(ss -tnH state established "( sport = :$gport or dport = :$gport )" | awk -v p=":$gport" '$4 ~ p"$" && $1 > r {r = $1} $3 ~ p"$" && $2 > s {s = $2} $3 ~ p"$" && $1 > g {g = $1} END {printf "%d/%d/%d", r, s, g}')" \
				"$(curl -s "http://${admin[0]}/metrics" | awk '$1 == "wsgate_frames_total{direction=\"to_client\"}" {printf "%.0f", $2}')" \
				"$(curl -s "http://${admin[0]}/metrics" | awk '$1 ~ /^wsgate_(tunnels_closed_total|closes_total)\{/ && $2 > 0 {sub(/^wsgate_/, "", $1); printf "%s=%d ", $1, $2}')"
			sleep 1
		done
	}
	# one NAME MEMBERS FROZEN: one fanout run, its report in $fdir/NAME.json.
	one() {
		sample >"$fdir/$1.watch" &
		local w=$!
		"$wsload" fanout -url "ws://${gw[0]}/room/byhand-frozen$$-$1-r%d" -rooms 1 -members "$2" -frozen "$3" \
			-rate "$rate" -size "$size" -duration "$dur" -settle 5s \
			-threshold 'delivered>=100' -threshold 'duplicates==0' -threshold 'out_of_order==0' -threshold 'dropped==0' \
			-json >"$fdir/$1.json" 2>"$fdir/$1.log" || fail=1
		kill "$w" 2>/dev/null || true
		wait "$w" 2>/dev/null || true
		echo
		echo "$1: -members $2 -frozen $3 -rate $rate -size $size -duration $dur (every 5th sample and those where a count changed):"
		awk '{k = $0; sub(/^ *[0-9.]+s /, "", k); sub(/ h2q [0-9\/,]+ unread [0-9\/]+ to_client [0-9]+/, "", k); if (k != prev || NR % 5 == 1) print "  " $0; prev = k}' "$fdir/$1.watch"
		jq -c '{connected, frozen, sent, expected, received, missing: (.expected - .received), delivered, duplicates, out_of_order,
			dropped_by, p50, p99, max, frozen_received, frozen_ended, frozen_last_sent_ms, passed}' "$fdir/$1.json"
	}
	one alone 99 0
	sleep 2
	one frozen 100 1
	echo
	jq -rn --slurpfile a "$fdir/alone.json" --slurpfile f "$fdir/frozen.json" '
		def row(n; r): "| \(n) | \(r.connected) | \(r.frozen) | \(r.delivered * 1000 | round / 1000)% | \(r.expected - r.received) | \(r.p50) | \(r.p99) | \(r.max) |";
		"| run | connected | frozen | the 99 readers: delivered | missing | p50 ms | p99 ms | max ms |",
		"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
		row("99 alone"; $a[0]), row("99 + 1 frozen"; $f[0]),
		"p99 ratio (with frozen / alone): \(($f[0].p99 / $a[0].p99) * 100 | round / 100)",
		"frozen member: \($f[0].frozen_ended), \($f[0].frozen_received) messages in its socket, newest sent \($f[0].frozen_last_sent_ms) ms into the sends"'
	grep -h 'slow consumer' "$dir"/relay-*.log 2>/dev/null | tail -3 | sed 's/^/relay: /' || true
	return $fail
}

status=0
case $what in
idle9000) idle 9000 10m 1000 || status=1 ;;
idle50000) idle 50000 "${BENCH_HOLD:-60s}" 250 || status=1 ;;
drain) chaos drain -drain-url "http://${admin[0]}/api/pools/relay/nodes/${relay[0]}/drain?migrate=1" || status=1 ;;
drain-term) chaos drain -kill-pid "${relaypid[0]}" -signal TERM || status=1 ;;
kill) chaos kill -kill-pid "${relaypid[0]}" -signal KILL || status=1 ;;
profile) profile || status=1 ;;
churn) churn || status=1 ;;
frozen) frozen || status=1 ;;
esac
echo "raw reports and logs: $dir"
exit $status
