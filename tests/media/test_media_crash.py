"""A gateway SIGKILLed between the upload of an image and its answer (S3 store on moto).

The instant is made deterministic by the S3 service itself being slow to answer: a proxy in
front of moto forwards the gateway's PUT (the object is stored), then holds the response. The
gateway is killed while it waits for it — after the upload, before the fence records the answer.
The retry with the same idempotency key (a restarted gateway, same replica) runs the idempotent
write again; its upload finds the object (412) and the answer carries the same reference.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway.helpers import KEY, connect, new_key
from tests.media.media_support import image_upstream, references
from tests.support import images
from tests.support.gateway import start_gateway, write_config
from tests.support.s3 import CREDENTIALS, MotoS3, S3Proxy
from tests.support.servers import count_executions

pytestmark = pytest.mark.timeout(180)


async def _snapshot(url: str, key: str, seed: int) -> Any:
    async with connect(url, "legacy") as client:
        return await client.call_tool("img__snapshot", {"seed": seed}, meta={KEY: key})


def test_sigkill_between_upload_and_answer_leaves_one_object_and_the_retry_answers_the_same_reference(
    tmp_path: Path, s3_server: MotoS3
) -> None:
    bucket = f"crash-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(bucket)
    seed, key = 31, new_key("crash")
    digest = hashlib.sha256(images.png(seed)).hexdigest()
    with S3Proxy(s3_server.url) as proxy:
        proxy.hold_puts = True
        store = f"s3://{bucket}/gw?endpoint_url={proxy.url}&region=us-east-1"
        config = write_config(tmp_path, {"upstreams": [image_upstream(tmp_path / "state")], "media": {"store": store}})
        with start_gateway(config, env=CREDENTIALS) as gateway:
            outcome: list[BaseException | Any] = []

            def first_call() -> None:
                try:
                    outcome.append(anyio.run(_snapshot, gateway.url, key, seed))
                except BaseException as exc:  # noqa: BLE001 - the call dies with the gateway; any way it ends is kept
                    outcome.append(exc)

            caller = threading.Thread(target=first_call)
            caller.start()
            assert proxy.put_forwarded.wait(30), "the gateway never uploaded the image"
            assert s3_server.objects(bucket) == {f"gw/sha256/{digest}": len(images.png(seed))}

            gateway.kill()  # uploaded, not answered: the fence still says pending
            caller.join(30)
            assert outcome and isinstance(outcome[0], BaseException), f"the first call was answered: {outcome}"
            proxy.hold_puts = False
            proxy.release()

            gateway.start()  # the same port: the same replica, whose old claims are dead
            retried = anyio.run(_snapshot, gateway.url, key, seed)

    assert not retried.is_error, retried
    assert references(retried) == [{
        "type": "image", "uri": f"dex-gateway://media/sha256/{digest}", "mime_type": "image/png",
        "sha256": digest, "size_bytes": len(images.png(seed)),
    }]
    assert s3_server.objects(bucket) == {f"gw/sha256/{digest}": len(images.png(seed))}
    assert proxy.statuses("PUT") == [200, 412]  # the retry's upload found the object
    assert count_executions(tmp_path / "state", tool="snapshot", key=key) == 2  # an idempotent write, run again
