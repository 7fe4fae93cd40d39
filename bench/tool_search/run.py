"""Retrieval quality and speed of tool search rankers over the benchmark catalog.

    .venv/bin/python bench/tool_search/run.py [--sizes 1000 10000] [--methods ...]

Prints recall@1, recall@5, MRR over queries.json (the answering tool must be ranked), the index
build time and query latency (p50, p95) per catalog size. Results: bench/tool_search/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# One BLAS thread, as docs/discovery.md recommends for the gateway: on a busy 2-core machine
# OpenBLAS's threads spin against other work and a 0.5 ms matrix-vector product takes 8 ms.
# `--blas-threads` keeps the library's default instead.
if "--blas-threads" not in sys.argv:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import catalog as bench_catalog  # noqa: E402

from gateway.pipeline.tool_search import ToolIndex, document_of, load_embedder, words  # noqa: E402

QUERIES = json.loads(Path(__file__).with_name("queries.json").read_text())
Search = Callable[[str], list[str]]


def raw_text(tool: dict[str, Any]) -> str:
    props = (tool.get("inputSchema") or {}).get("properties") or {}
    params = " ".join(f"{k} {v.get('description', '')}" for k, v in props.items() if isinstance(v, dict))
    return f"{tool['name']} {tool.get('title') or ''} {tool.get('description') or ''} {params}"


def fts5_plain(tools: list[dict[str, Any]]) -> Search:
    """FTS5 BM25, one column: the raw name, description and parameters (unicode61 keeps `get_sum` one token? no: splits on _)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE d USING fts5(body)")
    db.executemany("INSERT INTO d(rowid, body) VALUES (?, ?)", ((i, raw_text(t)) for i, t in enumerate(tools)))
    names = [t["name"] for t in tools]

    def search(q: str) -> list[str]:
        expr = " OR ".join(f'"{w}"' for w in sorted(set(words(q))))
        rows = db.execute("SELECT rowid FROM d WHERE d MATCH ? ORDER BY bm25(d) LIMIT 20", (expr,)).fetchall()
        return [names[r[0]] for r in rows]
    return search


def bm25s_plain(tools: list[dict[str, Any]]) -> Search:
    import bm25s

    names = [t["name"] for t in tools]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([raw_text(t) for t in tools], stopwords="en", show_progress=False), show_progress=False)

    def search(q: str) -> list[str]:
        docs, _ = retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k=20, show_progress=False)
        return [names[int(i)] for i in docs[0]]
    return search


def fts5_split_weighted(tools: list[dict[str, Any]], weights: tuple[float, float, float] = (3.0, 1.0, 0.5)) -> Search:
    """FTS5 BM25 with the name split into words, porter stemming and three weighted fields."""
    docs = [document_of(t) for t in tools]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE d USING fts5(name, text, params, tokenize='porter unicode61')")
    db.executemany("INSERT INTO d(rowid, name, text, params) VALUES (?, ?, ?, ?)",
                   ((i, d.name_words, d.text, d.params) for i, d in enumerate(docs)))
    w = weights

    def search(q: str) -> list[str]:
        expr = " OR ".join(f'"{t}"' for t in sorted(set(words(q))))
        rows = db.execute(f"SELECT rowid FROM d WHERE d MATCH ? ORDER BY bm25(d, {w[0]}, {w[1]}, {w[2]}) LIMIT 20",
                          (expr,)).fetchall()
        return [docs[r[0]].name for r in rows]
    return search


def fts5_split(tools: list[dict[str, Any]]) -> Search:
    return fts5_split_weighted(tools, (1.0, 1.0, 1.0))


def _ranked(index: ToolIndex) -> Search:
    return lambda q: [index.documents[i].name for i in index.search(q, 20)]


def bm25s_split_weighted(tools: list[dict[str, Any]]) -> Search:
    """The gateway's keyword side alone (name words x3, stop words dropped)."""
    return _ranked(ToolIndex([document_of(t) for t in tools], None, alpha=None))


def wordllama_only(tools: list[dict[str, Any]]) -> Search:
    return _ranked(ToolIndex([document_of(t) for t in tools], load_embedder(), alpha=0.0))


def hybrid(tools: list[dict[str, Any]]) -> Search:
    """What the gateway runs: cosine + 0.2 x scaled BM25 (gateway/pipeline/tool_search.py)."""
    return _ranked(ToolIndex([document_of(t) for t in tools], load_embedder()))


def hybrid_alpha(alpha: float) -> Callable[[list[dict[str, Any]]], Search]:
    return lambda tools: _ranked(ToolIndex([document_of(t) for t in tools], load_embedder(), alpha=alpha))


METHODS: dict[str, Callable[[list[dict[str, Any]]], Search]] = {
    "fts5_bm25": fts5_plain, "bm25s": bm25s_plain, "fts5_split": fts5_split,
    "fts5_split_weighted": fts5_split_weighted, "bm25s_split_weighted": bm25s_split_weighted,
    "wordllama": wordllama_only, "hybrid": hybrid,
    **{f"hybrid_alpha_{a}": hybrid_alpha(a) for a in (0.1, 0.3, 0.5, 1.0)},
}


def measure(method: str, size: int) -> dict[str, Any]:
    tools = bench_catalog.catalog(size)
    started = time.perf_counter()
    search = METHODS[method](tools)
    build = time.perf_counter() - started
    ranks: list[int | None] = []
    latencies: list[float] = []
    for query, answer in QUERIES:
        t = time.perf_counter()
        found = search(query)
        latencies.append(time.perf_counter() - t)
        ranks.append(found.index(answer) + 1 if answer in found else None)
    n = len(QUERIES)
    latencies.sort()
    return {
        "method": method, "tools": size, "queries": n,
        "recall@1": sum(1 for r in ranks if r == 1) / n,
        "recall@5": sum(1 for r in ranks if r is not None and r <= 5) / n,
        "mrr": sum(1 / r for r in ranks if r is not None) / n,
        "build_s": round(build, 3),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p95_ms": round(latencies[int(0.95 * (n - 1))] * 1000, 3),
        "misses@5": [q for (q, _), r in zip(QUERIES, ranks) if r is None or r > 5],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--methods", nargs="+", default=[m for m in METHODS if not m.startswith("hybrid_alpha")])
    parser.add_argument("--misses", action="store_true", help="print the queries missed in the top 5")
    parser.add_argument("--blas-threads", action="store_true", help="keep numpy's default BLAS threads")
    args = parser.parse_args()
    print("| method | tools | recall@1 | recall@5 | MRR | build s | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        for method in args.methods:
            r = measure(method, size)
            print(f"| {method} | {size} | {r['recall@1']:.3f} | {r['recall@5']:.3f} | {r['mrr']:.3f} | "
                  f"{r['build_s']} | {r['p50_ms']} | {r['p95_ms']} |", flush=True)
            if args.misses:
                for q in r["misses@5"]:
                    print(f"    miss: {q}")


if __name__ == "__main__":
    main()
