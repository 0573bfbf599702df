# gateway-server, the governing proxy, as a container image.
#
#   docker build -t llm-gateway .
#   docker run -p 8080:8080 -v $PWD/docs/server.toml:/etc/gateway/gateway.toml:ro llm-gateway
#
# Build stage. The dependencies are downloaded in a layer of their own (from the manifests and
# the lock file: `cargo fetch` needs no sources), and compiled into a BuildKit cache of the target
# directory that outlives the build: a change to the code recompiles the code only.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry cargo fetch --locked
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gateway-server && cp target/release/gateway-server /gateway-server

# Run stage: the binary and nothing else it does not need (rustls carries its own roots, so no
# CA bundle), as a user without privileges.
FROM debian:bookworm-slim
COPY --from=build /gateway-server /usr/local/bin/gateway-server
USER 10001:10001
EXPOSE 8080
# The config: a mounted file here, with any key overridden by environment variables
# (`SERVER__LISTEN`, `CHAT__SOURCES__S1__API_KEY`, …: docs/CONFIG.md).
ENTRYPOINT ["/usr/local/bin/gateway-server"]
CMD ["--config", "/etc/gateway/gateway.toml", "--listen", "0.0.0.0:8080"]
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/gateway-server", "--healthcheck", "127.0.0.1:8080"]
# SIGTERM stops accepting and lets calls in flight finish within `server.shutdown_grace_s`:
# give the runtime at least that long before it kills (docker stop -t, terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
