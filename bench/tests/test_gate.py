from bench.gate import pooled, ratio_interval


def test_a_gate_that_keeps_every_gold_record_has_no_spread() -> None:
    recall = [1.0, 0.5, 0.0, 1.0]
    assert ratio_interval(recall, recall) == (1.0, 1.0)


def test_one_lost_query_of_24_leaves_a_wide_interval_around_the_ratio() -> None:
    ungated = [1.0] * 24
    gated = [1.0] * 23 + [0.0]
    low, high = ratio_interval(ungated, gated)
    assert low < 23 / 24 < high
    assert high == 1.0
    assert low < 0.9


def _project(ungated: list[float], gated: list[float], clean: float, sizes: list[int]) -> dict:
    return {
        "negatives": 200,
        "ungated": {"recall@5_per_query": ungated},
        "gated": {
            "recall@5_per_query": gated,
            "negatives_without_context": clean,
            "bytes_per_query": sizes,
        },
    }


def test_pooled_weighs_each_set_by_its_queries() -> None:
    big = _project([1.0] * 90, [1.0] * 90, 0.95, [800] * 90)
    small = _project([1.0] * 10, [0.0] * 10, 0.85, [400] * 10)
    a = pooled({"big": big, "small": small})
    assert a["queries"] == 100
    assert a["ratio"] == 0.9
    assert abs(a["negatives_without_context"] - 0.9) < 1e-9
    assert a["mean_bytes_real"] == 760
