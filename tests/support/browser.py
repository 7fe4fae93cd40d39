"""Real headless Chromium (Debian's `/usr/bin/chromium`, driven by Playwright; never
`playwright install`) for the browser tests of the host's page and the gateway's console.

    sync_api = require_browser()        # at module level: skips the module, saying why, without one
    @pytest.fixture(scope="module")
    def browser(): yield from launch(sync_api)
    @pytest.fixture
    def page(browser, request): yield from phone_page(browser, request.node.name)

Screenshots: tests/artifacts/browser/<test>.png (kept after the run, ignored by git).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import anyio
import pytest

from tests.support.servers import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]
ARTIFACTS = REPO_ROOT / "tests" / "artifacts" / "browser"
T = TypeVar("T")
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True, "has_touch": True}


def require_browser() -> ModuleType:
    """Playwright's sync API; skips the calling test module when chromium or playwright is missing."""
    if not CHROMIUM.exists():
        pytest.skip(
            "the browser tests need Debian's chromium at /usr/bin/chromium; `make test` installs it "
            "(apt-get install -y chromium) when apt-get is there and it runs as root",
            allow_module_level=True,
        )
    return pytest.importorskip(
        "playwright.sync_api", reason="the browser tests need the playwright package (pip install -e '.[test]')"
    )


def launch(sync_api: ModuleType) -> Iterator[Any]:
    """One headless chromium with a throwaway profile, for a fixture to yield from."""
    profile = tempfile.mkdtemp(prefix="dex-chromium-")
    with sync_api.sync_playwright() as playwright:
        # Playwright gives every launch a fresh profile of its own; the XDG dirs keep chromium's
        # other files in this temporary directory too.
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            env={"HOME": profile, "XDG_CONFIG_HOME": profile, "XDG_CACHE_HOME": profile},
        )
        yield chromium
        chromium.close()
    shutil.rmtree(profile, ignore_errors=True)


def phone_page(browser: Any, name: str, *, context_options: dict[str, Any] | None = None,
               ignore: tuple[str, ...] = ()) -> Iterator[Any]:
    """A phone-sized tab; a script error or a Content-Security-Policy violation fails the test
    (console messages containing one of `ignore` excepted). Its screenshot is kept as `name`.png."""
    context = browser.new_context(**(context_options or PHONE))
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))

    def console(message: Any) -> None:
        text = message.text
        if ("Refused to" in text or "Content Security Policy" in text) and not any(i in text for i in ignore):
            errors.append(text)

    tab.on("console", console)
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    tab.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    context.close()
    assert not errors, errors


def run_async(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`anyio.run(fn, *args)` in a thread of its own: Playwright's sync API keeps an event loop
    running in the test's thread, where another cannot start."""
    box: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            box.append(anyio.run(fn, *args))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return box[0]
