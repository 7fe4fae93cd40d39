"""Go-style durations, the one way the gateway reads a length of time written as text:
connector manifests (`executeMethodTimeout: 30s`, `1m30s`, `500ms`) and the command line
(`fences purge --older-than 24h`)."""

from __future__ import annotations

import re

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> float:
    """Seconds in `text` (`24h`, `1m30s`, `500ms`); ValueError when it is not a Go duration."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"not a duration: {text!r} (write e.g. 24h, 1m30s, 500ms)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text))
