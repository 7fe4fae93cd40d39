"""Ranking tool definitions for a natural-language query: what `search_tools` and
`dex-gateway tools search` answer with (docs/discovery.md; measured in bench/tool_search/).

The score is the cosine similarity of wordllama's static embeddings (256 dimensions; the weights
ship inside the wheel and load from the package folder with downloads disabled) plus a fifth of
a BM25 score (bm25s) over the name split into words, the title and description, and the
parameters' names and descriptions. Built once per catalog version; a query is one sparse score
plus one matrix-vector product over the catalog.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # numpy, bm25s and wordllama load with the first index, not with the gateway
    import numpy as np
    import numpy.typing as npt

__all__ = ["Document", "Embedder", "ToolIndex", "document_of", "load_embedder", "split_name", "words"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[A-Za-z0-9]+")
# Weight of the keyword score (scaled to 1 at the best match) against the cosine (bench/tool_search/RESULTS.md).
ALPHA = 0.2
# A short English stop list: words that say nothing about which tool is meant.
_STOPWORDS = frozenset(
    "a an and are as at be by can do for from give has have i in is it its me my of on or please "
    "show that the this to up we what when which who with you your".split())


def split_name(name: str) -> str:
    """`get_currentTime`, `get-sum`, `HTTPServer.list` -> "get current time", "get sum", "http server list"."""
    return " ".join(w.lower() for part in _WORD.findall(name) for w in _CAMEL.split(part) if w)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


@dataclass(frozen=True)
class Document:
    name: str
    name_words: str
    text: str  # title and description
    params: str  # parameter names (split) and descriptions


def document_of(tool: Mapping[str, Any]) -> Document:
    """The searchable fields of one tool definition (MCP `Tool` JSON)."""
    name = str(tool.get("name", ""))
    text = " ".join(str(tool.get(k) or "") for k in ("title", "description"))
    schema = tool.get("inputSchema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    params: list[str] = []
    if isinstance(props, Mapping):
        for key, prop in props.items():
            params.append(split_name(str(key)))
            if isinstance(prop, Mapping) and isinstance(prop.get("description"), str):
                params.append(prop["description"])
    return Document(name, split_name(name), text, " ".join(params))


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class _WordLlama:
    def __init__(self) -> None:
        import wordllama

        self._model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        vectors = np.asarray(self._model.embed(list(texts), norm=True), dtype=np.float32)
        return vectors


def load_embedder() -> Embedder:
    """wordllama's bundled 256-dimension model, from the installed package only (never the network)."""
    return _WordLlama()


def _tokens(text: str) -> list[str]:
    return [w for w in words(text) if w not in _STOPWORDS]


class ToolIndex:
    """An immutable index over a list of tool definitions; `search` answers ranked positions.

    Score = cosine(query, tool) + alpha * bm25(query, tool) / max bm25 over the catalog. The
    keyword side is bm25s over the name's words three times (the name's weight), the title and
    description, and the parameters. `alpha=None` ranks by keywords only; `embedder=None`,
    likewise."""

    def __init__(self, documents: Sequence[Document], embedder: Embedder | None, alpha: float | None = ALPHA) -> None:
        import bm25s

        # bm25s sets its own logger to DEBUG on import ("Building index from tokens" per build).
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.documents = list(documents)
        self._alpha = alpha
        corpus = [_tokens(f"{d.name_words} {d.name_words} {d.name_words} {d.text} {d.params}") for d in self.documents]
        self._bm25 = bm25s.BM25()
        self._bm25.vocab_dict = {}
        if self.documents:
            self._bm25.index(corpus, show_progress=False)
        self._embedder = embedder if alpha is not None else None
        self._vectors: npt.NDArray[np.float32] | None = None
        if self._embedder is not None and self.documents:
            self._vectors = self._embedder.embed([f"{d.name_words}. {d.text}" for d in self.documents])

    def scores(self, query: str) -> npt.NDArray[np.float32]:
        """One score per document (higher is better)."""
        import numpy as np

        keyword = np.zeros(len(self.documents), dtype=np.float32)
        terms = [t for t in _tokens(query) if t in self._bm25.vocab_dict] if self.documents else []
        if terms:
            keyword = np.asarray(self._bm25.get_scores(terms), dtype=np.float32)
        if self._vectors is None or self._embedder is None:
            return keyword
        semantic = self._vectors @ self._embedder.embed([query])[0]
        top = float(keyword.max()) if keyword.size else 0.0
        alpha = self._alpha or 0.0
        fused = semantic + (alpha / top) * keyword if top > 0 else semantic
        return np.asarray(fused, dtype=np.float32)

    def search(self, query: str, limit: int = 10, allowed: Sequence[bool] | None = None) -> list[int]:
        """Positions of the best `limit` documents; `allowed[i]` False hides document i (never ranked)."""
        import numpy as np

        if not self.documents or limit <= 0:
            return []
        scores = self.scores(query).astype(np.float64)
        if allowed is not None:
            scores[~np.asarray(allowed, dtype=bool)] = -np.inf
        k = min(limit, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        ranked = top[np.argsort(-scores[top], kind="stable")]
        return [int(i) for i in ranked if np.isfinite(scores[i])]

