#!/usr/bin/env bash
# `make conformance`: the official MCP conformance suites -- @modelcontextprotocol/conformance
# 0.1.16 (`--suite all`) and 0.2.0-alpha.12 (`--requirements 2025-11-25`, `--requirements
# 2026-07-28`, the tasks extension scenarios included) -- run directly against the reference server
# (conformance/reference_server.py, serving both eras, then the handshake era only) and through the
# Dex gateway fronting it (stateful and stateless). Prints the results scenario by scenario side by
# side, every difference from direct with its reason, and a summary; exits 1 when the stateful
# gateway fails a scored scenario that passes directly without a documented reason.
#
#   conformance/run.sh                                   # everything (about 2 minutes)
#   conformance/run.sh --suites 2026 --servers both      # a part (see compare.py --help)
#   GATEWAY_CMD="..." conformance/run.sh                 # another gateway command (gets: serve --config F --port 0)
#   GATEWAY_MEDIA=1 conformance/run.sh                   # the gateway with a media store (a local directory)
#   CONFORMANCE_JOBS=1 conformance/run.sh                # one target at a time (default: 3 in parallel)
# Loopback only. Needs node >= 20 and npm (Node 20 gets fs.globSync from fs-globsync-hook.mjs).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
PY="${PY:-$ROOT/.venv/bin/python}"
command -v node >/dev/null || { echo "conformance: node (>= 20) is needed" >&2; exit 2; }
command -v npm >/dev/null || { echo "conformance: npm is needed" >&2; exit 2; }
(cd "$HERE" && npm install --no-audit --no-fund --silent >/dev/null)
exec "$PY" "$HERE/compare.py" "$@"
