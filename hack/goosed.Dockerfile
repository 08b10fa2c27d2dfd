# An image for GooseAgents with `server.flavor: goosed` (goose's REST server).
#
# Which images carry goosed: the block-era goose images (ghcr.io/block/goose)
# built from the Dockerfile revision titled "Goose CLI and Server Docker
# Image", which ran `cargo build --package goose-cli --package goose-server`
# and copied goosed to /usr/local/bin/goosed (block/goose Dockerfile at
# 019d15b3). A later revision ("goose CLI Docker Image", 8a8b8e95) builds the
# CLI only, the ghcr.io/aaif-goose/goose images do not carry goosed, and
# upstream removed goosed itself after goose 1.41. The release at which the
# Dockerfile changed was not pinned: check an image with
#   docker run --rm --entrypoint ls IMAGE -l /usr/local/bin/goosed
# A block-era image of goose 1.37–1.41 that has it can be spec.server.image
# as it is. Otherwise a REST-flavour agent needs an image you make: this file
# packages a goosed binary you bring:
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
