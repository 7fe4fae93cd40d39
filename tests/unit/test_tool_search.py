"""The tool search ranker (gateway/pipeline/tool_search.py): name splitting, the fields it reads,
wordllama loading from the installed package only, and masking (a hidden tool is never ranked)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from gateway.pipeline.tool_search import ToolIndex, document_of, load_embedder, split_name


def test_split_name_handles_snake_kebab_camel_and_acronyms() -> None:
    assert split_name("get_currentTime") == "get current time"
    assert split_name("get-sum") == "get sum"
    assert split_name("HTTPServer.list") == "http server list"


def test_document_reads_title_description_and_parameters() -> None:
    doc = document_of({"name": "send_payment", "title": "Pay", "description": "Send money.",
                       "inputSchema": {"type": "object", "properties": {"toAccount": {"type": "string", "description": "Payee IBAN"}}}})
    assert doc.name_words == "send payment"
    assert doc.text == "Pay Send money."
    assert doc.params == "to account Payee IBAN"


def test_embedder_loads_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("wordllama tried the network")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    vectors = load_embedder().embed(["what time is it", "send a message"])
    assert vectors.shape == (2, 256)


TOOLS = [
    {"name": "get_current_time", "description": "Get current time in a specific timezone"},
    {"name": "send_payment", "description": "Send money to someone."},
    {"name": "slack_post_channel_message", "description": "Post one top-level message to a Slack channel."},
]


def test_ranks_by_meaning_and_masks_hidden_tools() -> None:
    index = ToolIndex([document_of(t) for t in TOOLS], load_embedder())
    assert [index.documents[i].name for i in index.search("what time is it in Tokyo", 1)] == ["get_current_time"]
    assert index.documents[index.search("pay Alice 40 euros", 1)[0]].name == "send_payment"
    # Masked: the best match is hidden, and never appears at any depth.
    ranked = index.search("what time is it in Tokyo", 10, allowed=[False, True, True])
    assert 0 not in ranked and len(ranked) == 2


def test_empty_catalog_and_empty_query() -> None:
    assert ToolIndex([], load_embedder()).search("anything") == []
    assert len(ToolIndex([document_of(t) for t in TOOLS], None, alpha=None).search("", 5)) <= 3
