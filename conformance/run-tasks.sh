#!/usr/bin/env bash
# The ten `tasks-*` scenarios of the MCP conformance suite 0.2.0-alpha.12 (the SEP-2663 tasks
# extension, 2026-07-28 wire), run twice on loopback: directly against the project's reference
# tasks server (examples/servers/tasks_server.py, stateless Streamable HTTP), and through the Dex
# gateway fronting it (one streamable_http upstream, prefix ""). Prints both per-scenario results
# and pass counts side by side; exits 1 when the gateway passes fewer scenarios than direct.
#
#   conformance/run-tasks.sh                          # tasks.plain_required: wait (the default)
#   PLAIN_REQUIRED=refuse UPSTREAM_PROTOCOL=handshake conformance/run-tasks.sh
#       # the gateway refuses plain calls of required tools (-32021), which it knows from the
#       # handshake-era listing (a 2026-07-28 upstream lists no taskSupport)
# Needs node >= 20 and npm (Node 20 gets fs.globSync from fs-globsync-hook.mjs).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PY:-$ROOT/.venv/bin/python}"
GATEWAY_CMD="${GATEWAY_CMD:-$ROOT/.venv/bin/dex-gateway}"
SCENARIOS="tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal
tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications
tasks-required-task-error tasks-mrtr-composition"
cd "$HERE"
npm install --no-audit --no-fund --silent >/dev/null
SUITE="$HERE/node_modules/conformance-next/dist/index.js"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dex-conformance-tasks-XXXXXX")"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_url() {  # log file -> URL from its "listening on" line
  for _ in $(seq 1 150); do
    url="$(grep -o 'listening on http://[^ ]*' "$1" 2>/dev/null | head -1 | cut -d' ' -f3)" || true
    [ -n "$url" ] && { echo "$url"; return 0; }
    sleep 0.1
  done
  echo "no 'listening on' line in $1:" >&2; cat "$1" >&2; return 1
}

DEX_EXAMPLE_STATE_DIR="$WORK/server-state" "$PY" "$ROOT/examples/servers/tasks_server.py" --transport http --port 0 \
  >"$WORK/server.log" 2>&1 &
PIDS+=($!)
SERVER_URL="$(wait_url "$WORK/server.log")"

cat >"$WORK/gateway.yaml" <<YAML
server: {host: 127.0.0.1, port: 0}
upstreams:
  # The suite is a plain MCP client (no idempotency keys): let keyless writes through.
  - {name: tasks, transport: streamable_http, url: "$SERVER_URL", prefix: "", keyless_writes: pass,
     protocol: ${UPSTREAM_PROTOCOL:-auto}}
fences: {store: "sqlite:///$WORK/gateway.db"}
tasks: {plain_required: ${PLAIN_REQUIRED:-wait}}
YAML
(cd "$ROOT" && exec $GATEWAY_CMD serve --config "$WORK/gateway.yaml" --port 0) >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
GATEWAY_URL="$(wait_url "$WORK/gateway.log")"
for _ in $(seq 1 50); do grep -q "catalog ready" "$WORK/gateway.log" && break; sleep 0.1; done

run() {  # name url
  for scenario in $SCENARIOS; do
    node --import ./fs-globsync-hook.mjs "$SUITE" server --url "$2" --scenario "$scenario" \
      -o "$WORK/$1" >"$WORK/$1-$scenario.out" 2>&1 || true
  done
}
run direct "$SERVER_URL"
run gateway "$GATEWAY_URL"

"$PY" - "$WORK" $SCENARIOS <<'PY'
import glob, json, os, sys
work, scenarios = sys.argv[1], sys.argv[2:]
def checks(name, scenario):
    found = glob.glob(os.path.join(work, name, f"server-{scenario}-*", "checks.json"))
    return json.load(open(found[0])) if found else None
def verdict(found):
    if found is None:
        return "error", []
    failed = [c for c in found if c.get("status") == "FAILURE"]
    if failed:
        return "FAIL", failed
    return ("skip" if all(c.get("status") == "SKIPPED" for c in found) else "pass"), []
rows, score = [], {"direct": 0, "gateway": 0}
for s in scenarios:
    d, g = verdict(checks("direct", s)), verdict(checks("gateway", s))
    score["direct"] += d[0] in ("pass", "skip"); score["gateway"] += g[0] in ("pass", "skip")
    rows.append((s, d[0], g[0], g[1]))
print(f"{'scenario':34} {'direct':>7} {'gateway':>8}")
for s, d, g, failed in rows:
    print(f"{s:34} {d:>7} {g:>8}")
    for c in failed:
        print(f"      {c['id']}: {(c.get('errorMessage') or '')[:240]}")
print(f"{'passed (of ' + str(len(scenarios)) + ')':34} {score['direct']:>7} {score['gateway']:>8}")
print(f"\nlogs and results: {work}")
sys.exit(1 if score["gateway"] < score["direct"] else 0)
PY
