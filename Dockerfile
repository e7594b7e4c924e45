# One small non-root image with the three binaries:
#   docker build -t ghcr.io/datum-cloud/edgegate:v0.1.0 .
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p edgegate-webhook -p edgegate-pruner -p edgegate-producer \
 && install -D -m 0755 target/release/edgegate-webhook /out/edgegate-webhook \
 && install -D -m 0755 target/release/edgegate-pruner /out/edgegate-pruner \
 && install -D -m 0755 target/release/edgegate-producer /out/edgegate-producer

# distroless/cc: glibc and CA certificates, no shell; "nonroot" runs as UID 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/edgegate-webhook"]
