#!/usr/bin/env bash
# MCP conformance suite (server scenarios, --suite all) run twice: directly against the
# reference "everything" server, and through the Dex gateway fronting it (one upstream,
# streamable_http, prefix ""). Prints both pass/fail counts side by side and the scenarios
# that fail only through the gateway; exits 1 when the gateway passes fewer than direct.
#
#   conformance/run.sh                 # uses .venv/bin/dex-gateway
#   GATEWAY_CMD="..." conformance/run.sh   # another gateway command (gets: serve --config F --port 0)
#   GATEWAY_MEDIA=1 conformance/run.sh     # the gateway with a media store (a local directory): image
#                                          # results reach the suite as "[image 1]" + a resource_link
# Loopback only. Needs node >= 20 and npm (Node 20 gets fs.globSync from fs-globsync-hook.mjs).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
GATEWAY_CMD="${GATEWAY_CMD:-$ROOT/.venv/bin/dex-gateway}"
cd "$HERE"
npm install --no-audit --no-fund --silent >/dev/null
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dex-conformance-XXXXXX")"
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

node everything-server.mjs --port 0 >"$WORK/server.log" 2>&1 &
PIDS+=($!)
SERVER_URL="$(wait_url "$WORK/server.log")"

cat >"$WORK/gateway.yaml" <<YAML
# Stateful: elicitation and sampling requests from the upstream are relayed over the client session.
server: {host: 127.0.0.1, port: 0, stateful: true}
upstreams:
  # The suite is a plain MCP client (no idempotency keys): let keyless writes through.
  - {name: everything, transport: streamable_http, url: "$SERVER_URL", prefix: "", keyless_writes: pass}
fences: {store: "sqlite:///$WORK/fences.db"}
YAML
if [ -n "${GATEWAY_MEDIA:-}" ]; then echo "media: {store: \"file://$WORK/media\"}" >>"$WORK/gateway.yaml"; fi
(cd "$ROOT" && exec $GATEWAY_CMD serve --config "$WORK/gateway.yaml" --port 0) >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
GATEWAY_URL="$(wait_url "$WORK/gateway.log")"
for _ in $(seq 1 50); do grep -q "catalog ready" "$WORK/gateway.log" && break; sleep 0.1; done

suite() {  # name url
  node --import ./fs-globsync-hook.mjs node_modules/@modelcontextprotocol/conformance/dist/index.js \
    server --url "$2" --suite all -o "$WORK/$1" >"$WORK/$1.out" 2>&1 || true
}
suite direct "$SERVER_URL"
suite gateway "$GATEWAY_URL"

python3 - "$WORK" <<'PY'
import glob, json, os, re, sys
work = sys.argv[1]
def summary(name):
    text = open(os.path.join(work, name + ".out"), encoding="utf-8").read()
    return {m.group(2): m.group(1) == "✓" for m in re.finditer(r"^([✓✗]) ([\w-]+):", text, re.M)}
def reasons(name, scenario):
    out = []
    for f in glob.glob(os.path.join(work, name, f"server-{scenario}-*", "checks.json")):
        for c in json.load(open(f)):
            if c.get("status") == "FAILURE":
                out.append(f"{c['id']}: {c.get('errorMessage') or ''} {json.dumps(c.get('details') or '')[:300]}".strip())
    return out
d, g = summary("direct"), summary("gateway")
dp, gp = sum(d.values()), sum(g.values())
print(f"{'':10} {'passed':>7} {'failed':>7}")
print(f"{'direct':10} {dp:>7} {len(d) - dp:>7}")
print(f"{'gateway':10} {gp:>7} {len(g) - gp:>7}")
only = [s for s, ok in d.items() if ok and not g.get(s, False)]
if only:
    print("\nfail only through the gateway:")
    for s in only:
        print(f"  {s}")
        for r in reasons("gateway", s) or ["(no failed check recorded; see the gateway output)"]:
            print(f"      {r}")
print(f"\nlogs and results: {work}")
sys.exit(1 if gp < dp else 0)
PY
