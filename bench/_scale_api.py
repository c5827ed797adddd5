"""The API of ``bench scale`` with in-distribution query vectors: ``wakemark serve``'s
gunicorn (same arguments, hooks and settings) on an app whose embedder still embeds
each query with MiniLM (its cost stays in the figures), then answers a vector of
``_scale_data``'s latent space chosen by the query text instead.

Real queries are embedded by the model that embedded their records, so they land among
them; MiniLM vectors of query text against synthetic records are far from every row, and
the HNSW walk then visits far more of the graph than any real search would. Both are
reported: this app is the case users have, the plain server the worst case.

Run by ``bench/scale.py`` as ``gunicorn ... bench._scale_api:app``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from bench import _scale_data as data
from wakemark.services.api import create_app
from wakemark.shared.embedding import Embedder, Model
from wakemark.shared.runtime import Runtime

BIG = data.spaces()[0]
PROJECTION = data.projection()


@dataclass(frozen=True, eq=False)
class LatentModel(Model):
    def embed_query(self, text: str) -> np.ndarray:
        super().embed_query(text)  # the model's work, as for a real query
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        return data.vectors(BIG, 1, np.random.default_rng(seed), PROJECTION)[0]


class LatentEmbedder(Embedder):
    def model(self) -> Model:
        return LatentModel(**vars(super().model()))


runtime = Runtime.build()
# Before the first use, as a runtime's parts are built on first use.
runtime.__dict__["embedder"] = LatentEmbedder(runtime.settings.onnx_model_path)
app = create_app(runtime=runtime)
