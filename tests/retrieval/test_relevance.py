"""The shipped fusion is at least as good as plain RRF (and both legs) on the labelled set."""

from __future__ import annotations

from pathlib import Path

from bench import relevance


def test_shipped_fusion_beats_or_matches_plain_rrf(onnx_model_path: Path) -> None:
    result = relevance.run(model_path=onnx_model_path)
    assert result["records"] >= 150 and result["queries"] >= 50
    m = result["backends"]["sqlite"]
    for metric in ("recall@5", "mrr"):
        assert m["shipped"][metric] >= m["rrf"][metric]
        assert m["rrf"][metric] >= max(m["lexical"][metric], m["vector"][metric])
