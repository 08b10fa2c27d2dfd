# An image for GooseAgents with `server.flavor: goosed` (goose's REST server).
#
# goosed is in no official image (the goose image ships only the `goose` CLI,
# which serves ACP) and upstream removed it after goose 1.41, so a REST-flavour
# agent needs an image you make. This file packages a goosed binary you bring:
# from a goose 1.37–1.41 build of the goose-server crate, made as goose's own
# docs describe, or from the goose Desktop 1.37–1.41 Linux package, which
# bundles it. It does not fetch or compile goose itself.
#
#   make docker-build-goosed GOOSED_DIR=/path/to/dir-with-goosed IMG_GOOSED=registry.example.com/goosed:1.41.0
#
# which runs
#
#   docker build -f hack/goosed.Dockerfile --build-context goosed=/path/to/dir-with-goosed -t IMG hack
#
# The runtime matches the official goose image's (Debian bookworm with the
# same libraries), so a binary built as goose builds its releases runs here;
# the `goosed --help` step fails the build, not the pod, when it does not.

FROM debian:bookworm-slim AS goosed
RUN apt-get update && \
    apt-get install -y --no-install-recommends ca-certificates libssl3 libdbus-1-3 libgomp1 libxcb1 curl git && \
    rm -rf /var/lib/apt/lists/* && \
    groupadd --gid 1000 goose && \
    useradd --uid 1000 --gid 1000 --create-home --home-dir /home/goose goose && \
    mkdir -p /home/goose/.config/goose /data/goose && \
    chown -R 1000:1000 /home/goose /data/goose
COPY --from=goosed --chmod=0755 goosed /usr/local/bin/goosed
RUN /usr/local/bin/goosed --help >/dev/null
# The operator sets these too (and the secret key, provider and model); they
# are here so that `docker run` of the image alone behaves the same way.
ENV HOME=/home/goose \
    GOOSE_HOST=0.0.0.0 \
    GOOSE_PORT=3000 \
    GOOSE_TLS=false \
    GOOSE_PATH_ROOT=/data/goose \
    GOOSE_DISABLE_KEYRING=1 \
    GOOSE_TELEMETRY_OFF=1
USER 1000:1000
WORKDIR /home/goose
EXPOSE 3000
ENTRYPOINT ["/usr/local/bin/goosed"]
CMD ["agent"]
