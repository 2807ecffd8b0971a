# syntax=docker/dockerfile:1.7
# The ingest service, `freshet-ingest` (docs/ingest.md): documents over HTTP onto the document
# topic. It embeds nothing: no ONNX Runtime, model or dictionary, and it keeps no state.
# Build from the repository root (docs/deploy.md):
#   docker build -f deploy/docker/ingest.Dockerfile -t freshet-ingest .
# Build arguments: RUST_IMAGE, RUNTIME_IMAGE (pinned below; pin digests in your registry).
ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG RUNTIME_IMAGE=debian:12.12-slim

FROM ${RUST_IMAGE} AS build
# cmake and the curl headers for librdkafka's build (deploy/install.sh).
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake libcurl4-openssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
# The release of rust-toolchain.toml, without its extra components (rustfmt, clippy).
ENV RUSTUP_TOOLCHAIN=1.95.0 CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN --mount=type=cache,id=freshet-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=freshet-target,target=/src/target,sharing=locked \
    cargo build --release --locked -p freshet-ingest --bin freshet-ingest \
    && install -D -m 0755 target/release/freshet-ingest /out/bin/freshet-ingest

# --- the runtime: Debian slim, the libraries the binary links, non-root ---
FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="freshet-ingest"
# libc6 and libgcc-s1 (the binary), zlib1g (librdkafka, linked into it);
# deploy/validate-deploy.sh checks with ldd that nothing else is needed.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libc6 libgcc-s1 zlib1g \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 freshet \
    && useradd --system --uid 10001 --gid freshet --home-dir /nonexistent --shell /usr/sbin/nologin freshet
COPY --from=build /out/bin/freshet-ingest /usr/local/bin/freshet-ingest
COPY deploy/docker/healthcheck.sh /usr/local/bin/freshet-healthcheck
COPY deploy/docker/freshet.toml /etc/freshet/freshet.toml
# The image's settings (deploy/docker/freshet.toml): listening on every interface. Writers must
# identify themselves there ([[ingest.keys]] or [ingest.jwt]): without them the service refuses
# to start. Mount your own file over /etc/freshet/freshet.toml, or set FRESHET_<SECTION>_<KEY>.
ENV FRESHET_CONFIG=/etc/freshet/freshet.toml
USER 10001:10001
# the HTTP API with /metrics, /healthz, /readyz ([ingest] listen)
EXPOSE 8090
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/freshet-healthcheck", "8090", "/healthz"]
ENTRYPOINT ["/usr/local/bin/freshet-ingest"]
CMD ["serve"]
