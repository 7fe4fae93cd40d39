"""The check of a configuration mistake: `config_from_text` refuses it with file and line and words
that name the key and the reason."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.config.model import config_from_text
from gateway.errors import ConfigError


def assert_refused(text: str, line: int, words: Sequence[str], *, source: str = "gateway.yaml") -> str:
    """The error message, after checking it names `source:line` and each of `words`."""
    with pytest.raises(ConfigError) as refused:
        config_from_text(text, source=source)
    message = str(refused.value)
    assert f"{source}:{line}" in message, message
    for word in words:
        assert word in message, (word, message)
    return message
