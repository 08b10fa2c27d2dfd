// Checks the Dockerfile with BuildKit's own parser. A module of its own
// because BuildKit would upgrade otel, grpc and golang.org/x/* in the main
// module; `make test` runs it (`make test-dockerfile`). BuildKit v0.34 needs go 1.26.8.
module github.com/adk2goose/goose-operator/test/dockerfile

go 1.26.8

require (
	github.com/moby/buildkit v0.34.2
	go.yaml.in/yaml/v3 v3.0.5
)

require (
	github.com/agext/levenshtein v1.2.3 // indirect
	github.com/containerd/typeurl/v2 v2.3.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/moby/docker-image-spec v1.3.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/tonistiigi/go-csvvalue v0.0.0-20240814133006-030d3b2625d0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
