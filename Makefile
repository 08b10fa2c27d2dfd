# goose-operator — run `make help` for the targets.

IMG_MANAGER ?= ghcr.io/adk2goose/goose-operator:dev
IMG_SIDECAR ?= ghcr.io/adk2goose/adk2goose:dev
IMG_GOOSED ?= goosed:local
CONTAINER_TOOL ?= docker
KUBECTL ?= kubectl
GOLANGCI_LINT_VERSION ?= v2.15.0
# Count-based on purpose: a duration makes Go 1.26's fuzz coordinator sometimes fail a clean run
# with "context deadline exceeded" (golang/go#75804, fixed in Go 1.27). `make fuzz FUZZTIME=5m` still works.
FUZZTIME ?= 20000x

LOCALBIN := $(CURDIR)/bin
CONTROLLER_GEN := $(LOCALBIN)/controller-gen
KUSTOMIZE := $(LOCALBIN)/kustomize
HELM := $(LOCALBIN)/helm
CRD_REF_DOCS := $(LOCALBIN)/crd-ref-docs
CHART := charts/goose-operator
GOLANGCI_LINT := $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# Files `make manifests generate build-installer api-docs` writes; `make test` fails when they are stale.
GENERATED := api/v1alpha1/zz_generated.deepcopy.go api/v1alpha1/applyconfiguration config/crd/bases config/rbac/role.yaml \
	$(CHART)/crds $(CHART)/files/manager-role.yaml dist/install.yaml docs/reference/api.md
# Modules whose go.mod and go.sum `make test` checks are tidy.
TIDY_MODULES := . test/dockerfile

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC manifests from the Go markers (and their copies in the Helm chart).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@# The chart ships byte copies so that it cannot drift from the markers.
	rm -f $(CHART)/crds/*.yaml && cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/manager-role.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy methods and the server-side-apply configurations of the API types.
	@# Removed first so that a type deleted from the API leaves no configuration behind.
	rm -rf api/v1alpha1/applyconfiguration
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" applyconfiguration:headerFile="hack/boilerplate.go.txt" paths="./api/v1alpha1"

.PHONY: api-docs
api-docs: $(CRD_REF_DOCS) ## Generate the API reference docs/reference/api.md from the Go types of api/v1alpha1.
	$(CRD_REF_DOCS) --source-path=api/v1alpha1 --config=hack/crd-ref-docs/config.yaml --renderer=markdown \
	  --templates-dir=hack/crd-ref-docs/templates --output-path=docs/reference/api.md --log-level=ERROR

.PHONY: verify-generated
verify-generated: ## Fail when the committed generated files are not what `make manifests generate build-installer api-docs` writes.
	@before=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	$(MAKE) --no-print-directory manifests generate build-installer api-docs >/dev/null; \
	after=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	if [[ "$$before" != "$$after" ]]; then \
	  echo "generated files were stale and have been regenerated: commit them"; \
	  diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi

.PHONY: verify-tidy
verify-tidy: ## Fail when `go mod tidy` would change go.mod or go.sum (of each module in TIDY_MODULES).
	@for m in $(TIDY_MODULES); do \
	  (cd $$m && go mod tidy -diff) || { echo "go.mod/go.sum of $$m are not tidy: run go mod tidy there and commit"; exit 1; }; done

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (pinned, built into bin/).
	$(GOLANGCI_LINT) run ./...

##@ Demo

.PHONY: demo
demo: build ## Run it all with no cluster: embedded control plane, the operator, a GooseAgent, a chat over ADK REST and A2A.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go run ./hack/demo --manager $(LOCALBIN)/manager --adk2goose $(LOCALBIN)/adk2goose

##@ Test

.PHONY: envtest
envtest: ## Build (once) the envtest kube-apiserver, etcd and kubectl from Go module sources; print their directory.
	@hack/setup-envtest.sh

.PHONY: test
test: verify-generated verify-tidy vet $(KUSTOMIZE) $(HELM) ## Run every test: unit, envtest (toolchain set up automatically), the Dockerfile and monitoring checks and short fuzzing.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go test ./... -coverprofile cover.out
	$(MAKE) --no-print-directory test-dockerfile
	$(MAKE) --no-print-directory test-monitoring
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

.PHONY: test-unit
test-unit: ## Run the tests that need no control plane (envtest suites skip themselves).
	go test ./...

.PHONY: test-dockerfile
test-dockerfile: ## Check the Dockerfile's targets, stages and build steps against `make build`, and that the e2e images follow them (no container engine needed).
	@# A module of its own: the BuildKit parser would upgrade otel, grpc and x/* in the main module.
	cd test/dockerfile && go vet ./... && go test ./...
	cd hack/e2e/images && go vet ./... && go test ./...

.PHONY: test-monitoring
test-monitoring: ## Check the chart's Grafana dashboard and Prometheus rules with Prometheus's PromQL parser and rulefmt, and that they read only exported series.
	@# A module of its own: Prometheus would upgrade much of the main module's dependencies.
	cd test/monitoring && go vet ./... && go test ./...

.PHONY: e2e
e2e: ## Run the e2e suite on a real one-node cluster (kubelet + containerd) it brings up and tears down. Needs root; see docs/development.md.
	hack/e2e/run.sh

.PHONY: e2e-down
e2e-down: ## Tear down what an interrupted or E2E_KEEP=1 `make e2e` left on this machine.
	hack/e2e/cluster.sh down

FUZZ_TARGETS ?=
.PHONY: fuzz
fuzz: ## Run every fuzz target (or those in FUZZ_TARGETS) for FUZZTIME each (default 20000x executions; a duration like 5m works too); FUZZPARALLEL workers, FUZZCACHEDIR for the found inputs.
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh $(FUZZ_TARGETS)

FUZZ_LONG_TIME ?= 10000000x
FUZZ_LONG_MINIMIZE ?= 10000x
.PHONY: fuzz-long
fuzz-long: ## Run every fuzz target (or those in FUZZ_TARGETS) for FUZZ_LONG_TIME each (default 10 million executions: hours, not for CI), minimising each new input for at most FUZZ_LONG_MINIMIZE executions, then keep the inputs that found new coverage in each package's testdata/fuzz.
	FUZZTIME=$(FUZZ_LONG_TIME) FUZZMINIMIZETIME=$(FUZZ_LONG_MINIMIZE) hack/fuzz.sh $(FUZZ_TARGETS)
	hack/fuzz-corpus.sh $(FUZZ_TARGETS)

FAULTS_AGENTS ?= 100
FAULTS_OPS ?= 1500
FAULTS_RESTARTS ?= 6
FAULTS_SEED ?= random
.PHONY: test-faults
test-faults: ## Run the operator under faults at length (FAULTS_AGENTS, FAULTS_OPS, FAULTS_RESTARTS; FAULTS_SEED replays a run, random by default); not for CI.
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" FAULTS_AGENTS=$(FAULTS_AGENTS) FAULTS_OPS=$(FAULTS_OPS) FAULTS_RESTARTS=$(FAULTS_RESTARTS) FAULTS_SEED=$(FAULTS_SEED) \
	  go test ./controllers/faults/ -run TestOperatorUnderFaults -count=1 -v -timeout 90m

##@ Benchmarks

AGENTS ?= 1000
PARKED_PERCENT ?= 90
SECRETS ?= 5000

.PHONY: bench-manager-memory
bench-manager-memory: build ## Table of manager RSS/heap with AGENTS agents and SECRETS unrelated Secrets (MANAGERS=a,b compares binaries).
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go run ./hack/managermem --manager $(or $(MANAGERS),$(LOCALBIN)/manager) --agents $(AGENTS) --secrets $(SECRETS)

SCALE_RUNS ?= bare,$(LOCALBIN)/manager
.PHONY: bench-manager-scale
bench-manager-scale: build ## Table of converging AGENTS agents from cold, per run on a fresh control plane: requests per agent by verb and resource, watches, no-op resync, stats work, RSS, apiserver/etcd CPU (SCALE_RUNS=bare,old,new; PARKED_PERCENT of them parked, default 90).
	KUBEBUILDER_ASSETS="$$(hack/setup-envtest.sh)" go run ./hack/managerscale --manager "$(SCALE_RUNS)" --agents $(AGENTS) --parked-percent $(PARKED_PERCENT)

LOAD_ARGS ?=
.PHONY: load
load: build ## Load bin/adk2goose with 2,000 concurrent /run_sse streams on the fake goose serve, 10 runs; prints a table (more flags: LOAD_ARGS="-streams 500 -runs 3").
	go run ./hack/load -adk2goose $(LOCALBIN)/adk2goose $(LOAD_ARGS)

SOAK_TURNS ?= 10000
SOAK_SEED ?=
.PHONY: soak
soak: build ## Seeded random-fault soak of bin/adk2goose: SOAK_TURNS turns over ADK REST and A2A on two peering replicas, with goose, sidecar, client and peer faults; checks the invariants and ends with `violations: N` (SOAK_SEED replays a schedule; not for CI).
	go run ./hack/soak -adk2goose $(LOCALBIN)/adk2goose -turns $(SOAK_TURNS) $(if $(SOAK_SEED),-seed $(SOAK_SEED))

STREAM_PATHS_ARGS ?=
.PHONY: stream-paths
stream-paths: build ## Table: goose direct vs a plain proxy vs bin/adk2goose (and adk-go's REST server alone making the same reply), each server in its own process, on the fake goose serve (more flags: STREAM_PATHS_ARGS="-reply-time 2s -runs 3", "-flavor goosed", "-breakdown" for where its first event waits).
	go run ./hack/streampaths -adk2goose $(LOCALBIN)/adk2goose $(STREAM_PATHS_ARGS)

.PHONY: stream-targets
stream-targets: build ## Check adk2goose's binding targets on the workload users run: replies paced like a model, Poisson arrivals at concurrency 50, then one at a time; 3 runs each, medians.
	@# Both workloads run, and the target fails when either missed a target.
	c50=0; c1=0; \
	  go run ./hack/streampaths -adk2goose $(LOCALBIN)/adk2goose -targets -runs 3 -replies 300 -reply-time 2s -arrivals poisson -concurrency 50 -goose-idle-timeout 5s || c50=$$?; \
	  go run ./hack/streampaths -adk2goose $(LOCALBIN)/adk2goose -targets -runs 3 -replies 30 -reply-time 500ms -concurrency 1 -held 200 || c1=$$?; \
	  exit $$((c50 | c1))

.PHONY: live-bench
live-bench: build ## Table: time to first event over /run_live vs /run_sse at concurrency 1 (target: live <= sse + 1 ms), then 500 live sockets at once x 3 turns each, and memory per idle socket, on bin/adk2goose and the fake goose serve.
	go run ./hack/livebench -adk2goose $(LOCALBIN)/adk2goose

.PHONY: dashboard-picture
dashboard-picture: build ## Draw docs/images/dashboard.png: the dashboard's queries run by Prometheus's engine over a 4-minute recording of bin/adk2goose's /metrics under load.
	rm -rf $(LOCALBIN)/dashboardshot && mkdir -p docs/images
	go run ./hack/dashboardshot -adk2goose $(LOCALBIN)/adk2goose -out $(LOCALBIN)/dashboardshot/scrapes
	cd test/monitoring && go run ./render -scrapes $(LOCALBIN)/dashboardshot/scrapes -out $(CURDIR)/docs/images/dashboard.png

##@ Build

.PHONY: build
build: ## Build the manager, adk2goose (the images' binaries) and goosectl (a CLI for people) into bin/.
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/adk2goose ./cmd/adk2goose
	CGO_ENABLED=0 go build -trimpath -o $(LOCALBIN)/goosectl ./cmd/goosectl

.PHONY: run
run: manifests generate ## Run the manager against the cluster of the current kubeconfig.
	go run ./cmd/manager

.PHONY: docker-build
docker-build: ## Build the manager and adk2goose images (needs a container engine).
	$(CONTAINER_TOOL) build --target manager -t $(IMG_MANAGER) .
	$(CONTAINER_TOOL) build --target adk2goose -t $(IMG_SIDECAR) .

.PHONY: docker-build-goosed
docker-build-goosed: ## Package a goosed binary you bring (GOOSED_DIR holds it; goose 1.37–1.41) as IMG_GOOSED, for server.flavor goosed.
	@if [ ! -f "$(GOOSED_DIR)/goosed" ]; then echo "GOOSED_DIR must name a directory holding a goosed binary from goose 1.37–1.41 (see hack/goosed.Dockerfile)" >&2; exit 2; fi
	$(CONTAINER_TOOL) build -f hack/goosed.Dockerfile --build-context goosed=$(GOOSED_DIR) -t $(IMG_GOOSED) hack

##@ Deployment

.PHONY: build-installer
build-installer: manifests $(KUSTOMIZE) ## Render config/default into dist/install.yaml (CRD, RBAC, manager) for `kubectl apply --server-side -f`.
	mkdir -p dist
	$(KUSTOMIZE) build config/default > dist/install.yaml.tmp
	mv dist/install.yaml.tmp dist/install.yaml

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart in charts/goose-operator.
	$(HELM) lint --strict $(CHART)

.PHONY: install
install: manifests $(KUSTOMIZE) ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests $(KUSTOMIZE) ## Remove the CRDs from the cluster.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) ## Deploy the operator (CRDs, RBAC, manager) to the cluster.
	$(KUSTOMIZE) build config/default | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove the operator from the cluster.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

$(CONTROLLER_GEN): hack/tools/go.mod
	cd hack/tools && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(KUSTOMIZE): hack/tools/go.mod
	cd hack/tools && go build -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(HELM): hack/tools/go.mod
	cd hack/tools && go build -o $@ helm.sh/helm/v4/cmd/helm

$(CRD_REF_DOCS): hack/tools/go.mod
	cd hack/tools && go build -o $@ github.com/elastic/crd-ref-docs

$(GOLANGCI_LINT):
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint $@
