# matserve container image. Stage 1 builds on the CUDA devel image with the repository's own
# scripts (scripts/dev/install-deps.sh, the one install script the README and CI use;
# scripts/dev/build.sh); stage 2 is the CUDA runtime image with only the binaries and the non-CUDA
# shared libraries they need (found by ldd through scripts/device/bundle.sh), run as a non-root
# user.
# Build: docker build -t matserve .   (docs/deploy.md; what was and was not checked is there too)
ARG CUDA_VERSION=13.0.1
ARG UBUNTU=ubuntu24.04

# --- build ---------------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ARG CUDA_ARCHITECTURES=90
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/dev/install-deps.sh scripts/dev/install-deps.sh
# xz-utils: scripts/device/bundle.sh writes a .tar.xz; the apt lists are dropped in the same
# layer. The image builds without tests, so the packages only they use are left out
# (MATSERVE_TEST_DEPS=0).
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends xz-utils \
 && MATSERVE_TEST_DEPS=0 scripts/dev/install-deps.sh \
 && rm -rf /var/lib/apt/lists/*
COPY . .
RUN BUILD_DIR=/build MATSERVE_CUDA=ON scripts/dev/build.sh -DBUILD_TESTING=OFF \
      -DMATSERVE_BUILD_BENCH=OFF -DMATSERVE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && scripts/device/bundle.sh /build /build/server/matserve /build/client/matserve-cli \
 && mkdir -p /opt/matserve \
 && tar -C /opt/matserve -xJf /build/device/bundle.tar.xz \
 && ! LD_LIBRARY_PATH=/opt/matserve/lib ldd /opt/matserve/bin/* | grep "not found"

# --- run -----------------------------------------------------------------------------------------
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}
LABEL org.opencontainers.image.title="matserve" \
      org.opencontainers.image.description="GPU matrix-compute gRPC service (GEMM, transpose)" \
      org.opencontainers.image.source="https://github.com/matserve/matserve"
# bin/: matserve and matserve-cli; lib/: gRPC, protobuf, Abseil, prometheus-cpp, OpenBLAS and
# their dependencies. The CUDA runtime, cuBLAS and cuBLASLt come from this base image; libcuda
# and NVML from the host driver (NVIDIA container toolkit).
COPY --from=build /opt/matserve /opt/matserve
ENV PATH=/opt/matserve/bin:${PATH} \
    LD_LIBRARY_PATH=/opt/matserve/lib:/usr/local/cuda/lib64 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
RUN groupadd --system --gid 10001 matserve \
 && useradd --system --uid 10001 --gid matserve --no-create-home --shell /usr/sbin/nologin matserve
USER 10001:10001
# 50051: gRPC (MatrixService, grpc.health.v1.Health, reflection); 9464: Prometheus /metrics.
EXPOSE 50051 9464
# grpc.health.v1.Health/Check through the bundled CLI: exit 0 only when SERVING (NOT_SERVING
# while draining or after a device error), and no bearer token needed when --auth_tokens_file is
# on. Kubernetes uses its native gRPC probes against the same service (deploy/k8s/deployment.yaml).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["matserve-cli", "health", "--target=127.0.0.1:50051", "--deadline-ms=4000"]
STOPSIGNAL SIGTERM
# No ENTRYPOINT: a command given to `docker run` / compose names the binary itself (compose runs
# `matserve --listen=...`; `docker run IMAGE matserve-cli info --target=...` works too).
CMD ["matserve", "--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464", \
     "--shutdown_grace_seconds=30"]
