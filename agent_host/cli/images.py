"""`--image PATH` of `dex-agent run` and `chat`: the user's images, kept by reference.

The files are checked by the gateway's image rules (PNG, JPEG, GIF, WebP, at most 3,750,000
bytes) before a turn starts, copied into the host's image directory next to the session store
(`<store>-media/sha256/<hash>`), and the user message holds only their references.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..gateway_client.images import ImageLibrary, ImageReference, image_line
from ..terminal.console import Console

__all__ = ["add_image_args", "show_images", "user_images"]


def add_image_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--image", action="append", default=[], metavar="PATH", type=Path,
                        help=f"an image (PNG, JPEG, GIF, WebP) shown to the model with {what}; repeatable")


async def user_images(library: ImageLibrary, args: argparse.Namespace) -> list[ImageReference]:
    """References to the `--image` files (ValueError naming the file and the rule)."""
    return [await library.add_file(path) for path in getattr(args, "image", None) or []]


def show_images(console: Console, references: list[ImageReference]) -> None:
    for n, reference in enumerate(references, 1):
        console.say(f"     {image_line(n, reference)}")
