# Tandem server image. Build stage: CUDA devel image + the same scripts/setup.sh and
# scripts/build.sh that CI runs; runtime stage: CUDA runtime image with the binary only.
#   docker build -t tandem .
#   docker run --gpus all -p 8000:8000 -v $MODELS:/models tandem --model /models/<name>
# Base images are pinned by version. Ubuntu 22.04 carries the same library generations as
# Debian 12 (oneTBB 2021, spdlog 1.x, Catch2 2.x) that the scripts install.
FROM nvidia/cuda:13.0.0-devel-ubuntu22.04 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh
COPY . .
RUN TANDEM_BUILD_DIR=/src/build scripts/build.sh -DTANDEM_CUDA=ON -DTANDEM_TESTS=OFF

FROM nvidia/cuda:13.0.0-runtime-ubuntu22.04 AS runtime
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libtbb12 libspdlog1 libfmt8 libpcre2-8-0 libcublas-13-0 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 tandem
COPY --from=build /src/build/tandem /usr/local/bin/tandem
COPY --from=build /src/configs /etc/tandem/configs
USER tandem
EXPOSE 8000
VOLUME ["/models"]
ENTRYPOINT ["/usr/local/bin/tandem", "serve", "--host", "0.0.0.0", "--port", "8000"]
