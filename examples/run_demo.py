"""`make run`: the example upstreams and connector service, the gateway, then one agent turn.

Starts (all on loopback):
  * examples/servers/plain_server.py over HTTP on :9002 (the `notes` upstream),
  * examples/connectors/service.py on :9100 (the provider behind the example connectors),
  * `dex-gateway serve --config config/gateway.yaml` on :8080 (it starts the stdio upstream),
then runs `dex-agent run` with the scripted model against the gateway and shows the turn.
The gateway keeps serving until Ctrl-C (or exits after the turn with --exit-after-demo).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GATEWAY_URL = "http://127.0.0.1:8080/mcp"
DEMO_QUESTION = "What is the balance of account acme, and please refund order 5521 by 40 EUR."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exit-after-demo", action="store_true", help="stop everything after the agent's turn")
    args = parser.parse_args()

    state = ROOT / "var" / "demo"
    state.mkdir(parents=True, exist_ok=True)
    # A throwaway token shared by the demo connector service and the gateway's bindings.
    demo_token = secrets.token_hex(16)
    env = {
        **os.environ,
        "DEX_EXAMPLE_STATE_DIR": str(state),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DEX_EXAMPLE_CONNECTOR_TOKEN": demo_token,
        "BILLING_TOKEN": demo_token,
        "TICKETS_TOKEN": demo_token,
    }
    children: list[subprocess.Popen[bytes]] = []
    try:
        children.append(_start([sys.executable, "examples/servers/plain_server.py", "--transport", "http", "--port", "9002"], env, state / "notes.log"))
        children.append(_start([sys.executable, "examples/connectors/service.py", "--port", "9100"], env, state / "connectors.log"))
        _wait_http("http://127.0.0.1:9002/mcp", "notes server")
        gateway = _start([str(BIN / "dex-gateway"), "serve", "--config", "config/gateway.yaml"], env, None)
        children.append(gateway)
        _wait_http("http://127.0.0.1:8080/readyz", "gateway")
        print(f"\n== The gateway serves every tool at {GATEWAY_URL}", flush=True)
        subprocess.run([str(BIN / "dex-gateway"), "tools", "--config", "config/gateway.yaml"], cwd=ROOT, env=env, check=False, stderr=subprocess.DEVNULL)
        print(f"\n== An agent turn through the gateway (scripted model): {DEMO_QUESTION!r}\n", flush=True)
        turn = subprocess.run(
            [str(BIN / "dex-agent"), "run", "--gateway", GATEWAY_URL, "--model", "scripted", "--approve", "auto",
             "--store", str(state / "agent.db"), DEMO_QUESTION],
            cwd=ROOT,
            env=env,
            check=False,
        )
        if args.exit_after_demo:
            return turn.returncode
        print(f"\n== Gateway still serving at {GATEWAY_URL} — point any MCP client at it. Ctrl-C to stop.", flush=True)
        gateway.wait()
        return gateway.returncode or 0
    except KeyboardInterrupt:
        return 0
    finally:
        for child in reversed(children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def _start(cmd: list[str], env: dict[str, str], log: Path | None) -> subprocess.Popen[bytes]:
    out = open(log, "ab") if log else None  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out)


def _wait_http(url: str, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310 - loopback only
            return
        except urllib.error.HTTPError:
            return  # it answered: up (the MCP endpoint answers a bare GET with an error status)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise SystemExit(f"{what} did not come up at {url} within {timeout:g} s")


if __name__ == "__main__":
    sys.exit(main())
