#!/usr/bin/env bash
# Failovers by hand (not run in CI): the relay.v1 failover tests of
# relay-backend, repeated, with the acknowledged and lost writes of each
# run and in total (docs/protocol.md, "Waiting for replicas"):
#
#   bench/failover-loop.sh [RUNS] [sentinel|cluster|both]    (default 100 both)
#
# Each run is one master killed with SIGKILL while a relay.v1 writer sends
# one message per ACK (-redis-wait-replicas 1) and a reader on the other
# relay resumes: TestSentinel (a master, two replicas, one Sentinel) or
# the "master killed" part of TestCluster (three masters, three replicas).
# A run fails when an acknowledged write never reached the reader.
#
# Bounded: at most RUNS runs of each test, in batches of BATCH (default 5)
# test runs per process, and no new batch after LIMIT seconds (default
# 3600). LOAD=1 runs the relay package's tests (-race, built once) in a
# loop beside it, as load; LOAD_PKG names another package. Everything it
# started is stopped by PID; the test processes stop their redis-servers
# and relays themselves. Exit status 1 when any acknowledged write was
# lost or a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-100}
which=${2:-both}
batch=${BATCH:-5}
limit=${LIMIT:-3600}
case $which in
sentinel) tests=(sentinel) ;;
cluster) tests=(cluster) ;;
both) tests=(sentinel cluster) ;;
*)
	sed -n '2,20p' "$0"
	exit 2
	;;
esac
dir=$(mktemp -d /tmp/wsgate-failover-XXXXXX)
echo "work dir: $dir"
go test -race -c -o "$dir/relay-backend.test" ./relay-backend

pids=()
stop() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT

if [ "${LOAD:-0}" = 1 ]; then
	pkg=${LOAD_PKG:-./relay-backend/relay}
	go test -race -c -o "$dir/load.test" "$pkg"
	(
		cd "$pkg"
		for _ in $(seq 1000); do "$dir/load.test" -test.count=1 >/dev/null 2>&1 || true; done
	) &
	pids+=($!)
	echo "load: $pkg's tests in a loop (PID $!)"
fi

start=$SECONDS
status=0
for name in "${tests[@]}"; do
	case $name in
	sentinel) pattern='TestSentinel$' ;;
	cluster) pattern='TestCluster$/master_killed' ;;
	esac
	done_runs=0
	acked=0
	lost=0
	failed=0
	while [ "$done_runs" -lt "$runs" ] && [ $((SECONDS - start)) -lt "$limit" ]; do
		n=$((runs - done_runs < batch ? runs - done_runs : batch))
		out="$dir/$name-$done_runs.log"
		(cd relay-backend && "$dir/relay-backend.test" -test.run "$pattern" -test.count="$n" -test.v -test.timeout 20m) >"$out" 2>&1 || true
		# One "relay.v1: N writes acknowledged, M lost" line per run.
		while read -r a l; do
			done_runs=$((done_runs + 1))
			acked=$((acked + a))
			lost=$((lost + l))
			printf '%s run %d: %d acknowledged, %d lost\n' "$name" "$done_runs" "$a" "$l"
		done < <(sed -n 's/.*relay\.v1: \([0-9]*\) writes acknowledged, \([0-9]*\) lost.*/\1 \2/p' "$out")
		f=$(grep -c -- '^--- FAIL' "$out" || true)
		if [ "$f" -gt 0 ]; then
			failed=$((failed + f))
			echo "$name: $f failed test run(s), output in $out"
		fi
		if ! grep -q 'relay\.v1: ' "$out"; then
			echo "$name: no run finished in this batch, output in $out"
			failed=$((failed + 1))
			break
		fi
	done
	printf '%s total: %d runs, %d acknowledged, %d lost, %d failed (%ds so far)\n' \
		"$name" "$done_runs" "$acked" "$lost" "$failed" $((SECONDS - start))
	if [ "$lost" -gt 0 ] || [ "$failed" -gt 0 ]; then
		status=1
	fi
done
exit $status
