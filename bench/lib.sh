# Shell functions the by-hand bench scripts share (sourced, not run):
# building the binaries, free loopback ports, a redis-server and
# relay-backend replicas on 127.0.0.1, and stopping every process started
# here by PID when the script exits. The caller sets dir (a work
# directory) first and calls stack_init.

# stack_init builds wsgate, relay-backend and wsload into $dir and arms
# the stop of everything started from here on.
stack_init() {
	echo "work dir: $dir"
	go build -o "$dir/wsgate" ./cmd/wsgate
	go build -o "$dir/relay-backend" ./relay-backend
	go build -o "$dir/wsload" ./cmd/wsload
	pids=()
	trap stack_stop EXIT
}

# stack_stop stops the processes this script started, by PID.
stack_stop() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# free prints a free TCP port on 127.0.0.1.
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_relays N starts a redis-server and N relay-backend replicas
# sharing it; their addresses are in relays, and each answers /healthz
# (waited for, 10 s at most) before it returns.
start_relays() {
	local rport a i
	rport=$(free)
	redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --loglevel warning >"$dir/redis.log" 2>&1 &
	pids+=($!)
	relays=()
	for i in $(seq 1 "$1"); do
		a=127.0.0.1:$(free)
		"$dir/relay-backend" -listen "$a" -id "relay-$i" -redis "redis://127.0.0.1:$rport/0" >"$dir/relay-$i.log" 2>&1 &
		pids+=($!)
		relays+=("$a")
	done
	for a in "${relays[@]}"; do
		for _ in $(seq 1 100); do curl -sf "http://$a/healthz" >/dev/null && break; sleep 0.1; done
	done
}

# start_gateway starts wsgate on $dir/wsgate.toml and waits (10 s at
# most) until the admin listener at $admin says it is ready.
start_gateway() {
	"$dir/wsgate" -config "$dir/wsgate.toml" >"$dir/wsgate.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 100); do curl -sf "http://$admin/readyz" >/dev/null && break; sleep 0.1; done
}
