# Tandem server image.
#   docker build -t tandem .
#   docker run --gpus all -p 8000:8000 tandem                       # the bundled tandem-demo model
#   docker run --gpus all -p 8000:8000 -v $MODELS:/models tandem --model /models/<name> [flags]
# Build stage: Debian 12 (the distribution CI builds and tests on) with NVIDIA's CUDA 13 packages
# for Debian 12, then the same scripts/setup.sh and scripts/build.sh that CI runs. Runtime stage:
# Debian 12 with only the shared libraries the binary links (the NVIDIA container toolkit mounts
# the driver). The base image and the CUDA packages are pinned by version; the server runs as a
# non-root user.
ARG DEBIAN_IMAGE=debian:12.11
ARG CUDA_KEYRING=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb

FROM ${DEBIAN_IMAGE} AS cuda-repo
ARG CUDA_KEYRING
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates curl \
    && curl -fsSL -o /tmp/cuda-keyring.deb "${CUDA_KEYRING}" \
    && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
    && rm -rf /var/lib/apt/lists/*

FROM cuda-repo AS build
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
         cuda-nvcc-13-0 cuda-cudart-dev-13-0 libcublas-dev-13-0 \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:${PATH}
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh
COPY . .
RUN TANDEM_BUILD_DIR=/src/build scripts/build.sh -DTANDEM_CUDA=ON -DTANDEM_CUDA_ARCHS=all -DTANDEM_TESTS=OFF

FROM cuda-repo AS runtime
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends \
         cuda-cudart-13-0 libcublas-13-0 \
         libtbb12 libspdlog1.10 libfmt9 libpcre2-32-0 libcpp-httplib0.11 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 tandem
COPY --from=build /src/build/tandem /usr/local/bin/tandem
COPY --from=build /src/configs /etc/tandem/configs
COPY --from=build /src/models/tandem-demo /opt/tandem/models/tandem-demo
ENV TANDEM_CONFIG_DIR=/etc/tandem/configs \
    LD_LIBRARY_PATH=/usr/local/cuda/lib64 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER tandem
EXPOSE 8000
VOLUME ["/models"]
ENTRYPOINT ["/usr/local/bin/tandem", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--model", "/opt/tandem/models/tandem-demo"]
