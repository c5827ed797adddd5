"""The per-model cosine mappings of ``bench/gate_calibration.py`` on evidence whose cosines
are set."""

from __future__ import annotations

import numpy as np

from bench import fit_gate, gate_calibration
from wakemark.shared.models import MemoryRecord
from wakemark.shared.retrieval import gate
from wakemark.shared.retrieval.hits import SearchHit

NS = "/actor/a/project/p/"


def _query(cosine: float | None, baseline: float) -> fit_gate.Query:
    lift = None if cosine is None else cosine - baseline
    evidence = gate.Evidence(0.5, 0.0, False, cosine, lift, True, False, 0, 0, 3)
    hit = SearchHit(
        MemoryRecord(namespace=NS, title="t", summary="s"), "hybrid", 1.0, 0.2, evidence
    )
    return fit_gate.Query("q", frozenset(), [hit])


def test_z_maps_cosine_and_lift_on_the_unrelated_pairs_scale() -> None:
    null = np.array([0.5, 0.55, 0.6, 0.55])  # mean 0.55, std ~0.0354
    f = gate_calibration.calibration("z", null)
    [q] = gate_calibration.mapped([_query(0.7, 0.6)], f)
    e = q.hits[0].evidence
    assert e is not None and e.cosine is not None and e.lift is not None
    assert abs(e.cosine - (0.7 - 0.55) / null.std()) < 1e-9
    # the lift is the difference of the mapped cosines, not the raw lift rescaled by hand
    assert abs(e.lift - (f(0.7) - f(0.6))) < 1e-9
    assert q.hits[0].relevance == 0.2 and e.coverage == 0.5  # the rest untouched


def test_pct_keeps_cosines_above_the_table_apart() -> None:
    null = np.linspace(0.4, 0.6, 1001)
    f = gate_calibration.calibration("pct", null)
    assert abs(f(0.5) - 0.5) < 0.01
    assert f(0.3) == 0.0 and f(0.6) == 1.0
    assert 1.0 < f(0.7) < f(0.8)  # the tail, where real hits and lookalikes part


def test_lexical_hits_stay_without_vector_evidence() -> None:
    f = gate_calibration.calibration("z", np.array([0.1, 0.3]))
    [q] = gate_calibration.mapped([_query(None, 0.0)], f)
    e = q.hits[0].evidence
    assert e is not None and e.cosine is None and e.lift is None
