# The same image scripts/image.sh builds without an engine, for those with one: the three binaries
# and the edgegate CLI, non-root.
#   docker build --build-arg EDGEGATE_REVISION=$(git rev-parse --short=12 HEAD) -t ghcr.io/datum-cloud/edgegate:v0.2.0 .
FROM rust:1.89-bookworm AS build
ARG EDGEGATE_REVISION=
WORKDIR /src
COPY . .
RUN EDGEGATE_REVISION=$EDGEGATE_REVISION cargo build --release --locked \
      -p edgegate -p edgegate-webhook -p edgegate-pruner -p edgegate-producer \
 && install -D -m 0755 target/release/edgegate-webhook /out/edgegate-webhook \
 && install -D -m 0755 target/release/edgegate-pruner /out/edgegate-pruner \
 && install -D -m 0755 target/release/edgegate-producer /out/edgegate-producer \
 && install -D -m 0755 target/release/edgegate /out/edgegate

# distroless/cc: glibc and CA certificates, no shell; "nonroot" runs as UID 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/edgegate-webhook"]
