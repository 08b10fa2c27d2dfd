# Two images from one build stage: `--target manager` (the operator) and
# `--target adk2goose` (the sidecar). Separate images keep each one minimal and
# let the two roll out independently; the build steps mirror `make build`.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY sidecar/ sidecar/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -o /out/adk2goose ./cmd/adk2goose

FROM gcr.io/distroless/static-debian12:nonroot AS manager
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]

FROM gcr.io/distroless/static-debian12:nonroot AS adk2goose
COPY --from=build /out/adk2goose /adk2goose
USER 65532:65532
ENTRYPOINT ["/adk2goose"]
