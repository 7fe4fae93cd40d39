"""What one write per answer saves the gateway: a response's head and body written to a loopback
socket as two writes (uvicorn's way) or as one (gateway/http/uvicorn_protocol.py).

    .venv/bin/python bench/response_writes_bench.py [--responses 20000] [--rounds 3]

The writer is this process on uvloop, the reader another process draining its socket (TCP_NODELAY
on both ends, as the gateway's connections are). The head and body are the sizes of a small
tools/call answer. Printed: the writer's CPU per response (user + system from getrusage, which
on loopback includes the kernel delivering each segment to the reader), modes interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import statistics
import subprocess
import sys
import time

import uvloop

HEAD = (b"HTTP/1.1 200 OK\r\ndate: Sat, 05 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: application/json\r\ncontent-length: 160\r\n\r\n")
BODY = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"' + b"x" * 94 + b'"}]}}'

_READER = """
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while conn.recv(65536):
    pass
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(transport: asyncio.Transport, mode: str, responses: int) -> float:
    started = _cpu()
    for i in range(responses):
        if mode == "two writes":
            transport.write(HEAD)
            transport.write(BODY)
        else:
            transport.write(HEAD + BODY)
        if i % 16 == 0:
            await asyncio.sleep(0)  # let the loop drain anything buffered
    return (_cpu() - started) / responses * 1e6


async def main(responses: int, rounds: int) -> None:
    reader = subprocess.Popen([sys.executable, "-c", _READER], stdout=subprocess.PIPE)
    try:
        assert reader.stdout is not None
        port = int(reader.stdout.readline())
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        results: dict[str, list[float]] = {"two writes": [], "one write": []}
        for _ in range(rounds):
            for mode in results:
                results[mode].append(await _measure(transport, mode, responses))
                time.sleep(0.2)
        print(f"writer CPU per response (µs), median of {rounds} rounds of {responses}:")
        for mode, values in results.items():
            print(f"  {mode:10}  {statistics.median(values):6.1f}   rounds: {', '.join(f'{v:.1f}' for v in values)}")
        transport.close()
    finally:
        reader.kill()
        reader.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(main(args.responses, args.rounds))
