#!/usr/bin/env bash
# CI smoke of the gateway under load: starts redis-server, two relay-backend
# processes and wsgate on 127.0.0.1, runs wsload fanout (~5s) and idle
# (200 connections, 3s hold) through the gateway with generous thresholds
# (delivered>=99, p99<2s, failed==0, dropped==0), stops every process it
# started, and exits non-zero on a violation. Takes about 20 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./bench/cmd/benchrun -smoke "$@"
