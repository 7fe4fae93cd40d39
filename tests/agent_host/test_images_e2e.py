"""`dex-agent run --image` against a real gateway with a media store: the user's image and a tool
result's image reach the (scripted) model as bytes, the terminal shows one line per image, and
the host fetched the tool's image from the gateway's /media route with the agent's token."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from tests.agent_host.host_support import Stack, run_agent
from tests.media.media_support import image_upstream, sha
from tests.support import images
from tests.support.postgres import fresh_schema_url
from tests.support.gateway import start_gateway, write_config

pytestmark = pytest.mark.timeout(120)

TOKEN = "agent-image-token"


def test_run_with_an_image_shows_both_images_to_the_model(tmp_path: Path) -> None:
    config = write_config(tmp_path, {
        "auth": {"tokens": [{"principal": "agent", "token_sha256": sha(TOKEN)}]},
        "upstreams": [image_upstream(tmp_path / "state")],
        "media": {"store": (tmp_path / "media").as_uri()},
    })
    photo = tmp_path / "photo.gif"
    photo.write_bytes(images.gif())
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready")
        done = run_agent(
            "run", "--gateway", gateway.url, "--store", str(tmp_path / "host" / "s.db"), "--yes",
            "--model", "scripted:tests.agent_host.image_scripts:look_at_images", "--image", str(photo), "what is this?",
            env={"DEX_AGENT_TOKEN": TOKEN},
        )
    assert done.returncode == 0, done.stdout + done.stderr
    gif, png = images.gif(), images.png(5)
    assert f"[image 1: image/gif, {len(gif)} B, sha256 {hashlib.sha256(gif).hexdigest()[:4]}…]" in done.stdout
    assert f"[image 1: image/png, {len(png)} B, sha256 {hashlib.sha256(png).hexdigest()[:4]}…]" in done.stdout
    assert f"SAW user#1:{len(gif)}, tool#1:{len(png)}" in done.stdout
    # The user's image is kept in the session store; the tool's stays in the gateway's store.
    with sqlite3.connect(tmp_path / "host" / "s.db") as db:
        kept = dict(db.execute("SELECT sha256, data FROM host_images").fetchall())
    assert kept == {hashlib.sha256(gif).hexdigest(): gif}
    assert not (tmp_path / "host" / "s-media").exists()


def test_a_file_that_is_not_an_image_is_refused_before_the_turn(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    done = run_agent("run", "--gateway", "http://127.0.0.1:9/mcp", "--store", str(tmp_path / "s.db"),
                     "--image", str(tmp_path / "notes.txt"), "hi")
    assert done.returncode == 2
    assert "notes.txt: its bytes are not a PNG, JPEG, GIF or WebP image" in done.stderr


def test_two_hosts_on_one_postgresql_store_share_the_images(stack: Stack, tmp_path: Path) -> None:
    """The user's image is kept in the shared store: a second host process, with nothing local in
    common with the first (another $DEX_AGENT_LOCAL_STORE), shows it to the model."""
    gif = images.gif()
    photo = tmp_path / "photo.gif"
    photo.write_bytes(gif)
    model = "scripted:tests.agent_host.image_scripts:say_what_it_sees"
    with fresh_schema_url("shared_images") as store:
        first = run_agent("run", "--gateway", stack.gateway_url, "--store", store, "--session", "s-img", "--model", model,
                          "--image", str(photo), "what is this?", env={"DEX_AGENT_LOCAL_STORE": str(tmp_path / "a" / "l.db")})
        assert first.returncode == 0, first.stdout + first.stderr
        assert f"SAW user#1:{len(gif)}" in first.stdout
        second = run_agent("run", "--gateway", stack.gateway_url, "--store", store, "--session", "s-img", "--model", model,
                           "and now?", env={"DEX_AGENT_LOCAL_STORE": str(tmp_path / "b" / "l.db")})
        assert second.returncode == 0, second.stdout + second.stderr
        assert f"SAW user#1:{len(gif)}" in second.stdout, second.stdout
    assert not (tmp_path / "a" / "l-media").exists() and not (tmp_path / "b" / "l-media").exists()
