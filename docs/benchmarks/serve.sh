#!/usr/bin/env bash
# Measures `floodgate serve` with `floodgate load` on one machine, as
# docs/benchmarks/serve.md reports it.
#
#   docs/benchmarks/serve.sh NAME CONFIG [LOAD FLAGS...]
#
# Starts the server with CONFIG, waits for it, runs the load generator with
# --json (32 clients, 1,000 keys, 10 s unless the flags say otherwise), and
# prints one line: throughput, latency, outcomes, the CPU seconds the server
# and the generator used, and the store errors the server counted. With
# PROFILE=1 it also takes an 8-second CPU profile of the server under load
# (the config must set "pprof: true") into NAME.prof. Results go to
# $OUT (default ./bench-out). Redis, when the config names it, must already
# be running.
set -euo pipefail
name=$1; config=$2; shift 2
out=${OUT:-./bench-out}
bin=${FLOODGATE:-floodgate}
mkdir -p "$out"

$bin serve --config "$config" >"$out/$name.serve.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  curl -sf http://127.0.0.1:8080/readyz >/dev/null 2>&1 && break
  sleep 0.1
done

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)
errs() { curl -s http://127.0.0.1:8080/metrics | awk '$1=="floodgate_store_errors_total"{print $2}'; }

# Warm up: connections, key tables, JIT-free but caches and GC pacing.
$bin load --duration 2s --quiet "$@" >/dev/null
e0=$(errs); c0=$(cpu $spid)
ppid=""
if [ "${PROFILE:-0}" = 1 ]; then
  (sleep 1; curl -s -o "$out/$name.prof" "http://127.0.0.1:8080/debug/pprof/profile?seconds=8") &
  ppid=$!
fi
$bin load --duration 10s --quiet --json "$@" >"$out/$name.json"
c1=$(cpu $spid); e1=$(errs)
[ -n "$ppid" ] && wait "$ppid"
python3 - "$out/$name.json" "$name" "$(( c1 - c0 ))" "$tick" "${e0:-0}" "${e1:-0}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, ticks, hz, e0, e1 = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
l = s["latency_ms"]
print(f"{name:24s} {s['throughput']:8.0f} calls/s  p50 {l['p50']:.3f}  p99 {l['p99']:.3f}  p99.9 {l['p99.9']:.3f} ms"
      f"  allowed {s['allowed']} over {s['over_limit']} errors {s['errors']}"
      f"  server cpu {ticks/hz:.2f}s  client cpu {s['client_cpu_s']:.2f}s  store errors {e1-e0:.0f}")
PY
kill $spid
wait $spid 2>/dev/null || true
