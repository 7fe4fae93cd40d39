"""Safe text for cards and terminals: the one rule lives in the gateway (gateway/safe_text.py),
which builds approval cards too; the host uses it under this name."""

from gateway.safe_text import (
    MAX_ARGUMENTS,
    MAX_KEY_CHARS,
    MAX_LINE_CHARS,
    MAX_VALUE_CHARS,
    arguments_view,
    is_unsafe,
    key_view,
    terminal_text,
    value_view,
)

__all__ = ["MAX_ARGUMENTS", "MAX_KEY_CHARS", "MAX_LINE_CHARS", "MAX_VALUE_CHARS", "arguments_view", "is_unsafe",
           "key_view", "terminal_text", "value_view"]
