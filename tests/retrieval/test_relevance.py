"""The shipped fusion is at least as good as plain RRF (and both legs) on the labelled set."""

from __future__ import annotations

from pathlib import Path

from wakemark.shared.config import Settings

from .relevance import build_runtime, evaluate, load, populate


def test_shipped_fusion_beats_or_matches_plain_rrf(onnx_model_path: Path, tmp_path: Path) -> None:
    records, queries = load()
    assert len(records) >= 150 and len(queries) >= 50
    # Quality, not speed: no search may be cut short by the deadline on a busy box.
    settings = Settings(home=tmp_path, model_path=onnx_model_path, retrieval_budget_ms=10_000)
    runtime = build_runtime(settings)
    try:
        populate(runtime, records)
        m = evaluate(runtime, queries)
    finally:
        runtime.close()
    for metric in ("recall@5", "mrr"):
        assert m["shipped"][metric] >= m["rrf"][metric]
        assert m["rrf"][metric] >= max(m["lexical"][metric], m["vector"][metric])
