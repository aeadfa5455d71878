#!/usr/bin/env bash
# bench/shared-port.sh: 50,000 idle WebSockets from ONE wsload run
# (-procs 4) through six wsgate processes sharing one port with
# gateway.reuse_port, in front of five relay-backend processes, all on
# 127.0.0.1 (ports 17101-17105, 18080, 19091-19096). Prints tunnels per
# gateway, connections per relay, the gateways' RSS and wsload's report.
# Every process started here is stopped by PID.
set -u
cd "$(dirname "$0")/.."
B=$(mktemp -d /tmp/wsgate-shared-XXXXXX)
go build -o $B/wsgate ./cmd/wsgate && go build -o $B/relay-backend ./relay-backend && go build -o $B/wsload ./cmd/wsload || exit 1
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; sleep 3; for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT
nodes=""
for i in 1 2 3 4 5; do
  port=$((17100+i))
  $B/relay-backend -listen 127.0.0.1:$port -id relay-$i -drain-window 1s >$B/relay-$i.log 2>&1 &
  pids+=($!)
  nodes="$nodes  [[pools.nodes]]\n  addr = \"127.0.0.1:$port\"\n"
done
for g in 1 2 3 4 5 6; do
  printf "[gateway]\nlisten = \"127.0.0.1:18080\"\nreuse_port = true\ndrain_window = \"5s\"\n[admin]\nlisten = \"127.0.0.1:$((19090+g))\"\n[[pools]]\nname = \"relay\"\n$nodes[[routes]]\npool = \"relay\"\n" > $B/gw-$g.toml
  $B/wsgate -config $B/gw-$g.toml -watch=false >$B/gw-$g.log 2>&1 &
  pids+=($!)
done
sleep 3
for g in 1 2 3 4 5 6; do curl -sf 127.0.0.1:$((19090+g))/readyz >/dev/null || { echo "gateway $g not ready"; cat $B/gw-$g.log; exit 1; }; done
rss() { awk '/VmRSS/{print $2}' /proc/$1/status; }
gwpids=("${pids[@]:5:6}")
before=0; for p in "${gwpids[@]}"; do before=$((before+$(rss $p))); done
$B/wsload idle -url 'ws://127.0.0.1:18080/room/r%d' -n 50000 -rate 2500 -hold 60s -procs 4 -source 127.0.0.2-127.0.0.20 -json >$B/report.json 2>$B/wsload.err &
wl=$!; pids+=($wl)
# Sample while holding: 20s after the ramp (50000/2500 = 20s) the tunnels are up.
sleep 45
after=0; per=""
for g in 1 2 3 4 5 6; do
  t=$(curl -s 127.0.0.1:$((19090+g))/api/nodes | python3 -c 'import json,sys; print(json.load(sys.stdin)["tunnels"])')
  per="$per $t"
done
for p in "${gwpids[@]}"; do after=$((after+$(rss $p))); done
relays=""; for i in 1 2 3 4 5; do relays="$relays $(curl -s 127.0.0.1:$((17100+i))/info | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])')"; done
wait $wl
echo "tunnels per gateway:$per"
echo "connections per relay:$relays"
echo "gateway RSS total: ${before} KiB -> ${after} KiB"
python3 - $B/report.json <<'PY'
import json,sys
r=json.load(open(sys.argv[1]))
keys=[k for k in ("connected","failed","dropped","held","rss_per_conn_bytes","failed_by","dropped_by") if k in r]
print({k:r[k] for k in keys})
PY
tail -3 $B/wsload.err
