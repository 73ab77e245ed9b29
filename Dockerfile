# syntax=docker/dockerfile:1
#
# gpu-admission container image, the release build: the release binary,
# built in the Rust image, on a distroless non-root base (no shell, no
# package manager).
#
#   docker build -t gpu-admission:0.1.0 .
#
# CI builds and runs the runtime stage below (everything after the last
# FROM) with ci/image.sh: on a root filesystem it assembles from a binary
# built on the CI machine, since it pulls no base image. Keep the runtime
# stage to instructions that work there (LABEL, USER, EXPOSE, ENTRYPOINT,
# CMD, ENV).
#
# The builder's Rust version is the project's release toolchain (see
# docs/operations.md); builder and runtime share the Debian release, so the
# binary finds the same glibc. Pin both images by digest for a reproducible
# image.
ARG RUST_IMAGE=rust:1.95.0-slim-trixie
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian13:nonroot

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
# Paths inside the binary (panic locations) do not depend on where it was built.
ENV CARGO_TERM_COLOR=never \
    RUSTFLAGS="--remap-path-prefix=/src=. --remap-path-prefix=/usr/local/cargo=/cargo"
COPY . .
# Cargo.lock is honoured exactly (--locked); the shipped policies are embedded
# by build.rs. The registry and target caches only speed up rebuilds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin gpu-admission \
    && install -D -m 0755 target/release/gpu-admission /out/gpu-admission

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="gpu-admission" \
      org.opencontainers.image.description="Kubernetes admission webhook and CEL policy engine for GPU workloads" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/gpu-admission /usr/local/bin/gpu-admission
# distroless "nonroot": uid/gid 65532, as deploy/base/deployment.yaml runs it.
USER 65532:65532
# 8443: /mutate, /validate (TLS); 9090: /metrics, /report (HTTP); 8081: the
# kubelet's /healthz, /readyz (HTTP). The Deployment binds the last two to the
# pod's address; a bare `serve` keeps them on loopback.
EXPOSE 8443 9090 8081
ENTRYPOINT ["/usr/local/bin/gpu-admission"]
CMD ["serve"]
