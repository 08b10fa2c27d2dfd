package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerFlavor names the goose server program and the protocol it speaks.
// +kubebuilder:validation:Enum=serve;goosed
type ServerFlavor string

const (
	// ServerFlavorServe is `goose serve`: ACP over WebSocket, current goose,
	// shipped in the official goose image.
	ServerFlavorServe ServerFlavor = "serve"
	// ServerFlavorGoosed is `goosed`: the REST API of goose 1.37 to 1.41.
	// Current official images do not ship it (only some block-era
	// ghcr.io/block/goose images have /usr/local/bin/goosed), so an image
	// must be given.
	ServerFlavorGoosed ServerFlavor = "goosed"
)

// Mode is goose's tool-approval policy.
// +kubebuilder:validation:Enum=auto;approve;smart_approve;chat
type Mode string

const (
	// ModeAuto runs every tool without asking.
	ModeAuto Mode = "auto"
	// ModeApprove asks before every tool call.
	ModeApprove Mode = "approve"
	// ModeSmartApprove asks only before tool calls goose judges risky.
	ModeSmartApprove Mode = "smart_approve"
	// ModeChat never runs tools.
	ModeChat Mode = "chat"
)

// ExtensionType is the kind of a goose extension.
// +kubebuilder:validation:Enum=builtin;platform;stdio;streamable_http
type ExtensionType string

const (
	// ExtensionBuiltin is an MCP server compiled into goose, by name (memory,
	// computercontroller, ...).
	ExtensionBuiltin ExtensionType = "builtin"
	// ExtensionPlatform is a goose platform extension, in-process, by name
	// (developer, analyze, summon, skills, todo, ...).
	ExtensionPlatform ExtensionType = "platform"
	// ExtensionStdio is an MCP server goose starts as a child process.
	ExtensionStdio ExtensionType = "stdio"
	// ExtensionStreamableHTTP is a remote MCP server reached over streamable HTTP.
	ExtensionStreamableHTTP ExtensionType = "streamable_http"
)

// GooseAgentSpec is the desired state of a GooseAgent.
// +kubebuilder:validation:XValidation:rule="!(has(self.instructions) && has(self.instructionsFrom))",message="spec.instructions and spec.instructionsFrom are mutually exclusive",fieldPath=".instructionsFrom"
type GooseAgentSpec struct {
	// Server selects the goose server program, its image and pull policy.
	// +kubebuilder:default={}
	// +optional
	Server ServerSpec `json:"server,omitempty"`

	// Provider is the LLM provider and model goose uses.
	// +required
	Provider ProviderSpec `json:"provider"`

	// Description says what the agent is for. It is published in the A2A
	// agent card so that other agents can decide when to delegate to it.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`

	// Instructions are extra system instructions for goose, inline.
	// Mutually exclusive with instructionsFrom.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	Instructions string `json:"instructions,omitempty"`

	// InstructionsFrom reads the instructions from a ConfigMap or Secret key.
	// Mutually exclusive with instructions.
	// +optional
	InstructionsFrom *ValueSource `json:"instructionsFrom,omitempty"`

	// Extensions are the goose extensions enabled for every session, and the
	// only ones: goose's platform extensions that goose enables by default
	// (developer, analyze, apps, summon, skills, extensionmanager, ...) are
	// disabled unless listed here with type platform. Names must be unique.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Extensions []ExtensionSpec `json:"extensions,omitempty"`

	// Runtimes are language runtimes mounted read-only into the goose
	// container from images (Kubernetes image volumes), with their bin
	// directories on goose's PATH, so stdio extensions run by npx, uvx and the
	// like start from the official goose image, which has none.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Runtimes []RuntimeSpec `json:"runtimes,omitempty"`

	// Mode is the tool-approval policy: auto runs tools without asking; approve
	// asks before every tool call; smart_approve asks before risky ones; chat
	// runs no tools. Approvals reach ADK clients as tool confirmations.
	// +kubebuilder:default=auto
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// Replicas is the number of agent pods. Unset leaves the count to whoever
	// scales the StatefulSet (an HPA, or kubectl scale); the operator starts it at 1.
	// Each replica has its own session volume: a session stays on the pod that
	// created it, and the other pods forward requests for it there. Scaling
	// down keeps the removed pods' volumes; their sessions are unreachable
	// until the count grows back.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources of the goose container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Storage is the per-replica volume holding goose's and the sidecar's
	// session databases. It is immutable: a StatefulSet's volume claims cannot change.
	// +kubebuilder:default={}
	// +optional
	Storage StorageSpec `json:"storage,omitempty"`

	// Workspace is the volume mounted as goose's working directory.
	// +kubebuilder:default={}
	// +optional
	Workspace WorkspaceSpec `json:"workspace,omitempty"`

	// Sidecar configures the injected adk2goose sidecar, the pod's only exposed port.
	// +kubebuilder:default={}
	// +optional
	Sidecar SidecarSpec `json:"sidecar,omitempty"`

	// PodTemplate holds overrides applied to the agent pods.
	// +optional
	PodTemplate PodTemplateOverrides `json:"podTemplate,omitempty"`

	// NetworkPolicy, when set, makes the operator create a NetworkPolicy that
	// admits ingress only to the sidecar port.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Budget limits the LLM tokens the whole agent (all replicas together,
	// across restarts) may use per day, week or month. When it is spent, new
	// turns are refused (ADK REST 429 with Retry-After, A2A a failed task)
	// until the period ends or the budget is raised; turns already running
	// finish. Changing its values takes effect without restarting the pods.
	// +optional
	Budget *BudgetSpec `json:"budget,omitempty"`

	// Telemetry exports OpenTelemetry traces over OTLP/HTTP: the sidecar's
	// span of every turn (continuing the client's W3C traceparent) and, as
	// goose supports OTLP itself, goose's own traces, metrics and logs.
	// Without it nothing is exported.
	// +optional
	Telemetry *TelemetrySpec `json:"telemetry,omitempty"`

	// Idle parks the agent at zero pods when it is not used, and wakes it
	// when a request arrives. Without it the agent is never parked.
	// +optional
	Idle *IdleSpec `json:"idle,omitempty"`
}

// IdleSpec says when an agent is parked: scaled to zero pods, its sessions,
// usage, budget ledger and workspaces kept on their volumes. While it is
// parked its Service points at the operator's activator, which holds a
// request, wakes the agent and passes the request on once a pod is ready.
type IdleSpec struct {
	// After is how long no turn may have run on any replica before the
	// agent is parked, between 10s and 8760h. Unset: never parked for
	// being idle.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('8760h')",message="spec.idle.after must be between 10s and 8760h"
	// +optional
	After *metav1.Duration `json:"after,omitempty"`

	// Parked parks the agent by hand, whether or not it is idle. A manually
	// parked agent is not woken by requests; set it back to false (or run
	// goosectl wake) to wake it.
	// +optional
	Parked bool `json:"parked,omitempty"`
}

// TelemetrySpec configures OTLP export; it becomes the standard OTEL_*
// environment of the sidecar and goose containers.
type TelemetrySpec struct {
	// Endpoint is the OTLP/HTTP base URL (OTEL_EXPORTER_OTLP_ENDPOINT), e.g.
	// http://otel-collector.observability.svc:4318.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="spec.telemetry.endpoint must be an http or https URL"
	// +required
	Endpoint string `json:"endpoint"`

	// HeadersFrom are headers sent with every export, with values from
	// Secrets (an API key, say). Values are used as they are: percent-encode
	// commas (OTEL_EXPORTER_OTLP_HEADERS format).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	// +optional
	HeadersFrom []SecretHeader `json:"headersFrom,omitempty"`

	// SamplingPercent is the share of new traces recorded (0 to 100). A
	// trace a client started and sampled is always continued. Default 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	SamplingPercent *int32 `json:"samplingPercent,omitempty"`
}

// BudgetPeriod is the calendar period a token budget applies to, in UTC.
// +kubebuilder:validation:Enum=Day;Week;Month
type BudgetPeriod string

const (
	// BudgetPeriodDay starts at 00:00 UTC.
	BudgetPeriodDay BudgetPeriod = "Day"
	// BudgetPeriodWeek starts on Monday 00:00 UTC (ISO 8601 weeks).
	BudgetPeriodWeek BudgetPeriod = "Week"
	// BudgetPeriodMonth starts on the 1st, 00:00 UTC.
	BudgetPeriodMonth BudgetPeriod = "Month"
)

// BudgetSpec is a token limit per period for the whole agent.
// +kubebuilder:validation:XValidation:rule="!has(self.inputTokens) || self.inputTokens <= self.totalTokens",message="spec.budget.inputTokens must not exceed spec.budget.totalTokens",fieldPath=".inputTokens"
// +kubebuilder:validation:XValidation:rule="!has(self.outputTokens) || self.outputTokens <= self.totalTokens",message="spec.budget.outputTokens must not exceed spec.budget.totalTokens",fieldPath=".outputTokens"
type BudgetSpec struct {
	// Period is Day, Week or Month, calendar periods in UTC.
	// +required
	Period BudgetPeriod `json:"period"`
	// TotalTokens is the limit on input plus output tokens per period, as
	// goose counts them.
	// +kubebuilder:validation:Minimum=1
	// +required
	TotalTokens int64 `json:"totalTokens"`
	// InputTokens additionally limits prompt tokens per period.
	// +kubebuilder:validation:Minimum=1
	// +optional
	InputTokens *int64 `json:"inputTokens,omitempty"`
	// OutputTokens additionally limits completion tokens per period.
	// +kubebuilder:validation:Minimum=1
	// +optional
	OutputTokens *int64 `json:"outputTokens,omitempty"`
}

// ServerSpec selects the goose server.
// +kubebuilder:validation:XValidation:rule="!has(self.flavor) || self.flavor != 'goosed' || has(self.image)",message="spec.server.image is required when spec.server.flavor is goosed: current goose images ship no goosed (a block-era ghcr.io/block/goose image with /usr/local/bin/goosed, or one built with hack/goosed.Dockerfile)",fieldPath=".image",reason=FieldValueRequired
type ServerSpec struct {
	// Flavor is the goose server program: serve (`goose serve`, ACP; current
	// goose) or goosed (REST; goose 1.37 to 1.41, needs an image that has it).
	// +kubebuilder:default=serve
	// +optional
	Flavor ServerFlavor `json:"flavor,omitempty"`

	// Image is the goose container image. Defaults to the operator's goose
	// image for flavor serve; required for goosed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the goose container.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
}

// ProviderSpec is the LLM provider goose calls.
// +kubebuilder:validation:XValidation:rule="!(self.name in ['openai','anthropic','google','openrouter','azure_openai','groq','xai','mistral','deepseek','venice','tetrate']) || has(self.apiKeySecretRef)",messageExpression="'spec.provider.apiKeySecretRef is required for provider ' + self.name",fieldPath=".apiKeySecretRef",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.name != 'azure_openai' || has(self.baseURL)",message="spec.provider.baseURL (the Azure OpenAI endpoint) is required for provider azure_openai",fieldPath=".baseURL",reason=FieldValueRequired
type ProviderSpec struct {
	// Name is goose's provider id: openai, anthropic, google, ollama,
	// openrouter, azure_openai, litellm, groq, xai, databricks, ...
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`

	// Model is the provider's model name, e.g. gpt-4o or claude-sonnet-4-5.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Model string `json:"model"`

	// APIKeySecretRef names the Secret key holding the provider's API key. It
	// reaches goose only as an environment variable, never in its config file.
	// +optional
	APIKeySecretRef *SecretKeyRef `json:"apiKeySecretRef,omitempty"`

	// BaseURL overrides the provider's endpoint (OPENAI_HOST, OLLAMA_HOST,
	// ANTHROPIC_HOST, AZURE_OPENAI_ENDPOINT, LITELLM_HOST, ...).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="spec.provider.baseURL must be an http or https URL"
	// +optional
	BaseURL string `json:"baseURL,omitempty"`

	// Env sets further provider environment variables from Secrets, such as
	// OPENAI_ORGANIZATION or AZURE_OPENAI_DEPLOYMENT_NAME.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Env []SecretEnvVar `json:"env,omitempty"`
}

// SecretKeyRef selects a key of a Secret in the GooseAgent's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key within the Secret.
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	Key string `json:"key"`
}

// ConfigMapKeyRef selects a key of a ConfigMap in the GooseAgent's namespace.
type ConfigMapKeyRef struct {
	// Name of the ConfigMap.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key within the ConfigMap.
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	Key string `json:"key"`
}

// ValueSource reads a value from exactly one of a ConfigMap or a Secret key.
// +kubebuilder:validation:XValidation:rule="has(self.configMapKeyRef) != has(self.secretKeyRef)",message="exactly one of configMapKeyRef and secretKeyRef must be set"
type ValueSource struct {
	// ConfigMapKeyRef selects a ConfigMap key.
	// +optional
	ConfigMapKeyRef *ConfigMapKeyRef `json:"configMapKeyRef,omitempty"`
	// SecretKeyRef selects a Secret key.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// SecretEnvVar is an environment variable whose value comes from a Secret key.
type SecretEnvVar struct {
	// Name of the environment variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +required
	Name string `json:"name"`
	// SecretKeyRef selects the value.
	// +required
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
}

// EnvVar is an environment variable with a literal value or a Secret key.
// +kubebuilder:validation:XValidation:rule="has(self.value) != has(self.secretKeyRef)",message="exactly one of value and secretKeyRef must be set"
type EnvVar struct {
	// Name of the environment variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +required
	Name string `json:"name"`
	// Value is a literal value. Do not put secrets here; use secretKeyRef.
	// +kubebuilder:validation:MaxLength=8192
	// +optional
	Value *string `json:"value,omitempty"`
	// SecretKeyRef reads the value from a Secret key.
	// +optional
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty"`
}

// ExtensionSpec is one goose extension.
// +kubebuilder:validation:XValidation:rule="self.type != 'stdio' || has(self.cmd)",message="spec.extensions[].cmd is required when type is stdio",fieldPath=".cmd",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.type == 'stdio' || !(has(self.cmd) || has(self.args) || has(self.env))",message="spec.extensions[].cmd, args and env are only allowed when type is stdio",fieldPath=".cmd"
// +kubebuilder:validation:XValidation:rule="self.type != 'streamable_http' || has(self.uri)",message="spec.extensions[].uri is required when type is streamable_http",fieldPath=".uri",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="self.type == 'streamable_http' || !(has(self.uri) || has(self.headers) || has(self.headersFrom))",message="spec.extensions[].uri, headers and headersFrom are only allowed when type is streamable_http",fieldPath=".uri"
type ExtensionSpec struct {
	// Name identifies the extension. For builtin and platform extensions it is
	// goose's own extension name (developer, memory, todo, ...). Tools of
	// developer, analyze, summon and skills keep their own names (shell,
	// write, ...); other extensions' tools are named <name>__<tool>.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=63
	// +required
	Name string `json:"name"`

	// Type is builtin, platform, stdio or streamable_http.
	// +required
	Type ExtensionType `json:"type"`

	// Description tells the model what the extension is for.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`

	// Cmd is the program goose starts (stdio only). It must exist in the goose
	// image or come from spec.runtimes (npx, uvx, ...).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Cmd string `json:"cmd,omitempty"`

	// Args are the program's arguments (stdio only).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	// +optional
	Args []string `json:"args,omitempty"`

	// Env is the program's environment (stdio only).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Env []EnvVar `json:"env,omitempty"`

	// URI is the MCP server's endpoint (streamable_http only).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="spec.extensions[].uri must be an http or https URL"
	// +optional
	URI string `json:"uri,omitempty"`

	// Headers are literal HTTP headers sent to the MCP server (streamable_http only).
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Headers map[string]string `json:"headers,omitempty"`

	// HeadersFrom are HTTP headers whose values come from Secrets, for tokens
	// (streamable_http only).
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	HeadersFrom []SecretHeader `json:"headersFrom,omitempty"`

	// TimeoutSeconds bounds each call to the extension.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	TimeoutSeconds *int32 `json:"timeoutSeconds,omitempty"`
}

// RuntimeSpec is a runtime (node, uv, python, ...) taken from an image and
// mounted at /opt/goose-runtimes/<name> in the goose container.
type RuntimeSpec struct {
	// Name of the runtime; it names the mount directory.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=32
	// +required
	Name string `json:"name"`

	// Image holding the runtime, e.g. docker.io/library/node:22-bookworm-slim
	// or ghcr.io/astral-sh/uv:0.8. Its files must run on the goose image's
	// Debian bookworm (glibc) base.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +required
	Image string `json:"image"`

	// ImagePullPolicy of the image.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// SubPath is the directory of the image to mount, relative to its root
	// (usr/local for the node images); empty mounts the whole image.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="spec.runtimes[].subPath must be a relative path without .."
	// +optional
	SubPath string `json:"subPath,omitempty"`

	// BinPath is the directory of executables, relative to the mount, put
	// first on goose's PATH: bin (the default), or . for an image with the
	// executables at its root (the uv image).
	// +kubebuilder:default=bin
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(p, p == '..')",message="spec.runtimes[].binPath must be a relative path without .."
	// +optional
	BinPath string `json:"binPath,omitempty"`

	// Commands are the commands the runtime provides (node, npm, npx; uv,
	// uvx). A stdio extension whose cmd is a runtime command no runtime
	// provides is reported in the agent's conditions.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9][-._A-Za-z0-9]*$`
	// +kubebuilder:validation:items:MaxLength=64
	// +required
	Commands []string `json:"commands"`
}

// SecretHeader is an HTTP header whose value comes from a Secret key.
type SecretHeader struct {
	// Name of the header.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`
	// +kubebuilder:validation:MaxLength=128
	// +required
	Name string `json:"name"`
	// SecretKeyRef selects the value.
	// +required
	SecretKeyRef SecretKeyRef `json:"secretKeyRef"`
}

// StorageSpec is the per-replica session volume.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.storage is immutable: a StatefulSet's volume claim templates cannot change (resize the PVCs directly)"
type StorageSpec struct {
	// Size of each replica's volume.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="spec.storage.size must be at least 64Mi"
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName of the volume claims; unset uses the cluster default.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// WorkspaceScope says which sessions share a working directory.
// +kubebuilder:validation:Enum=agent;user;session
type WorkspaceScope string

const (
	// WorkspaceScopeAgent: every session works in the workspace root.
	WorkspaceScopeAgent WorkspaceScope = "agent"
	// WorkspaceScopeUser: the sessions of one ADK user id share a directory.
	WorkspaceScopeUser WorkspaceScope = "user"
	// WorkspaceScopeSession: every ADK session has a directory of its own.
	WorkspaceScopeSession WorkspaceScope = "session"
)

// DefaultWorkspaceRetention is spec.workspace.retention's default (its
// +kubebuilder:default marker says the same; validation_test checks both).
const DefaultWorkspaceRetention = 30 * 24 * time.Hour

// WorkspaceSpec is goose's working directory volume.
// +kubebuilder:validation:XValidation:rule="!(has(self.emptyDir) && has(self.persistentVolumeClaim))",message="spec.workspace.emptyDir and spec.workspace.persistentVolumeClaim are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="!(has(self.seed) && has(self.scope) && self.scope == 'agent')",message="spec.workspace.seed needs scope user or session: it fills the directories the sidecar creates",fieldPath=".seed"
type WorkspaceSpec struct {
	// MountPath is where the workspace is mounted in the goose container and
	// the working directory of new sessions.
	// +kubebuilder:default="/workspace"
	// +kubebuilder:validation:Pattern=`^/[^\x00]*$`
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!(self in ['/', '/data', '/tmp', '/etc', '/proc', '/sys', '/dev'])",message="spec.workspace.mountPath must not be a system directory or /data"
	// +optional
	MountPath string `json:"mountPath,omitempty"`

	// EmptyDir gives each pod a scratch workspace (the default).
	// +optional
	EmptyDir *corev1.EmptyDirVolumeSource `json:"emptyDir,omitempty"`

	// PersistentVolumeClaim mounts an existing claim, e.g. a ReadWriteMany
	// volume shared by all replicas.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`

	// Scope decides which sessions share a working directory: session (the
	// default) gives every ADK session a new directory of its own under
	// <mountPath>/sessions; user gives each ADK user id one under
	// <mountPath>/users; agent has every session work in mountPath itself.
	// This separates work, not tenants: goose runs all sessions as one user
	// in one process. A change applies to new sessions.
	// +kubebuilder:default=session
	// +optional
	Scope WorkspaceScope `json:"scope,omitempty"`

	// Retention removes user and session directories nobody has used for
	// this long; a session's directory goes at once when the session is
	// deleted. "0s" keeps them.
	// +kubebuilder:default="720h"
	// +kubebuilder:validation:XValidation:rule="duration(self) == duration('0s') || duration(self) >= duration('1h')",message="spec.workspace.retention must be 0s (keep) or at least 1h"
	// +optional
	Retention *metav1.Duration `json:"retention,omitempty"`

	// Seed fills every new user or session directory with files.
	// +optional
	Seed *WorkspaceSeed `json:"seed,omitempty"`
}

// WorkspaceSeed is where the files of a new workspace directory come from.
type WorkspaceSeed struct {
	// ConfigMapName names a ConfigMap in the GooseAgent's namespace; each
	// key becomes a file of that name (binaryData too). Later changes reach
	// directories created after them.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	ConfigMapName string `json:"configMapName"`
}

// SidecarSpec configures the injected adk2goose sidecar.
type SidecarSpec struct {
	// Image of the adk2goose sidecar. Defaults to the operator's sidecar image.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the sidecar container.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources of the sidecar container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Port the sidecar serves the ADK REST API and A2A on.
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Auth configures how the sidecar verifies its callers.
	// +kubebuilder:default={}
	// +optional
	Auth SidecarAuth `json:"auth,omitempty"`

	// CORSAllowedOrigins lists the browser origins allowed to call the sidecar
	// (for the ADK web UI), or "*".
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:XValidation:rule="self == '*' || (isURL(self) && url(self).getScheme() in ['http', 'https'])",message="spec.sidecar.corsAllowedOrigins entries must be \"*\" or an http(s) origin"
	// +optional
	CORSAllowedOrigins []string `json:"corsAllowedOrigins,omitempty"`
}

// AuthMode says how the sidecar verifies its callers.
// +kubebuilder:validation:Enum=token;kubernetes;oidc
type AuthMode string

const (
	// AuthModeToken: one shared token; the ADK user is whatever the client
	// names. The default: it needs no RBAC for clients and no identity
	// provider, and existing clients keep working.
	AuthModeToken AuthMode = "token"
	// AuthModeKubernetes: a token the cluster accepts for the agent's
	// audience (a projected ServiceAccount token), whose subject RBAC lets
	// `use` gooseagents/invoke on this agent. The caller is the ADK user.
	AuthModeKubernetes AuthMode = "kubernetes"
	// AuthModeOIDC: an ID token of an OIDC issuer. The caller is the ADK user.
	AuthModeOIDC AuthMode = "oidc"
)

// SidecarAuth configures inbound authentication of the sidecar.
// +kubebuilder:validation:XValidation:rule="(has(self.mode) && self.mode == 'oidc') == has(self.oidc)",message="spec.sidecar.auth.oidc is required with mode oidc and allowed only with it",fieldPath=".oidc"
// +kubebuilder:validation:XValidation:rule="!has(self.kubernetes) || (has(self.mode) && self.mode == 'kubernetes')",message="spec.sidecar.auth.kubernetes is allowed only with mode kubernetes",fieldPath=".kubernetes"
// +kubebuilder:validation:XValidation:rule="!has(self.adminGroups) || (has(self.mode) && self.mode != 'token')",message="spec.sidecar.auth.adminGroups needs mode kubernetes or oidc: in token mode every client may act for every user",fieldPath=".adminGroups"
type SidecarAuth struct {
	// Mode is how callers are verified: token (the default), kubernetes or
	// oidc. In kubernetes and oidc modes the verified caller is the ADK user
	// of every request, and a request naming another user is refused.
	// +kubebuilder:default=token
	// +optional
	Mode AuthMode `json:"mode,omitempty"`

	// TokenSecretRef names the Secret key holding the token clients send as
	// `Authorization: Bearer`, `X-API-Key` or `api_key`. Unset: the operator
	// generates one and keeps it in the Secret named <agent>-adk2goose. In
	// kubernetes and oidc modes the token authenticates only the agent's
	// pods to each other: whoever can read it can act for every user.
	// +optional
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`

	// Kubernetes configures mode kubernetes.
	// +optional
	Kubernetes *KubernetesAuth `json:"kubernetes,omitempty"`

	// OIDC configures mode oidc; required with it.
	// +optional
	OIDC *OIDCAuth `json:"oidc,omitempty"`

	// AdminGroups lists groups whose members may act for every user and
	// use the routes that are about no one user (traces, evals). Kubernetes
	// groups (such as system:serviceaccounts:<namespace>) or the OIDC groups
	// claim's values.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	// +optional
	AdminGroups []string `json:"adminGroups,omitempty"`
}

// KubernetesAuth configures the kubernetes mode.
type KubernetesAuth struct {
	// Audience a client's token must be issued for. Default
	// agents.adk2goose.dev/<namespace>/<name>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Audience string `json:"audience,omitempty"`
}

// OIDCAuth configures the oidc mode.
type OIDCAuth struct {
	// IssuerURL is the issuer, an https URL; its discovery document is
	// <issuerURL>/.well-known/openid-configuration.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https'",message="spec.sidecar.auth.oidc.issuerURL must be an https URL"
	// +required
	IssuerURL string `json:"issuerURL"`
	// Audience a token must be issued for (its aud claim; the client ID).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +required
	Audience string `json:"audience"`
	// UserClaim names the claim that is the ADK user.
	// +kubebuilder:default=sub
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +optional
	UserClaim string `json:"userClaim,omitempty"`
	// GroupsClaim names the claim listing the caller's groups.
	// +kubebuilder:default=groups
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty"`
	// AllowedUsers and AllowedGroups, when either is set, admit only those
	// users and members of those groups; both unset admit every caller the
	// issuer vouches for.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	// +optional
	AllowedUsers []string `json:"allowedUsers,omitempty"`
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	// +optional
	AllowedGroups []string `json:"allowedGroups,omitempty"`
}

// PodTemplateOverrides are applied to the agent pods.
type PodTemplateOverrides struct {
	// Labels added to the pods.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations added to the pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// NodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity of the pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// ServiceAccountName of the pods. Its token is never mounted: agent pods
	// do not talk to the Kubernetes API.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ImagePullSecrets of the pods.
	// +listType=atomic
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// Env adds environment variables to the goose container. Variables the
	// operator sets from other fields (such as GOOSE_MODEL from
	// spec.provider.model) or for the pod's wiring (such as HOME) cannot be
	// set here: the agent is then reported as InvalidSpec.
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`
	// SecurityContext replaces the pod security context. The default is the
	// "restricted" Pod Security Standard (non-root, RuntimeDefault seccomp).
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`
	// PriorityClassName of the pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// TerminationGracePeriodSeconds is how long a stopping pod (a rollout,
	// a deletion, a node drain) has. goose stops only once the turns
	// running on the pod have finished, waiting at most this minus 20
	// seconds; turns still running then end with an error event. The 20
	// seconds cover ending them and stopping both containers. Default 60.
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=86400
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// NetworkPolicySpec configures the optional NetworkPolicy.
type NetworkPolicySpec struct {
	// From lists the peers allowed to reach the sidecar port. Empty allows any
	// source; every other port of the pods is closed either way. When not
	// empty, the agent's own pods are always admitted as well, so replicas can
	// forward sessions to each other.
	// +listType=atomic
	// +optional
	From []networkingv1.NetworkPolicyPeer `json:"from,omitempty"`
}

// GooseAgentStatus is the observed state of a GooseAgent.
type GooseAgentStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded, StatsAvailable, with a
	// budget BudgetExhausted, and with spec.idle Parked.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of agent pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of agent pods ready to serve.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Endpoints are the in-cluster URLs clients call.
	// +optional
	Endpoints Endpoints `json:"endpoints,omitempty"`

	// Sessions counts ADK sessions across all replicas.
	// +optional
	Sessions SessionStats `json:"sessions,omitempty"`

	// Tokens counts LLM tokens used across all replicas, as goose reports them.
	// +optional
	Tokens TokenStats `json:"tokens,omitempty"`

	// StatsUpdatedAt is when sessions and tokens were last collected.
	// +optional
	StatsUpdatedAt *metav1.Time `json:"statsUpdatedAt,omitempty"`

	// Budget is the use of spec.budget in the current period, across all
	// replicas. Absent without a budget.
	// +optional
	Budget *BudgetStatus `json:"budget,omitempty"`

	// Idle says when the agent was last used, parked and woken. Absent
	// without spec.idle.
	// +optional
	Idle *IdleStatus `json:"idle,omitempty"`
}

// IdleStatus is an agent's parking state.
type IdleStatus struct {
	// LastActivityAt is the latest of the last turn on any replica (as the
	// sidecars' usage.db records it), the last wake, the agent's creation
	// and the moment its first ready pod became ready, as the operator last
	// looked. The agent is parked spec.idle.after later; never while no pod
	// is ready.
	// +optional
	LastActivityAt *metav1.Time `json:"lastActivityAt,omitempty"`
	// ParkedAt is when the agent was parked; set only while it is parked.
	// +optional
	ParkedAt *metav1.Time `json:"parkedAt,omitempty"`
	// WokenAt is when the agent was last woken.
	// +optional
	WokenAt *metav1.Time `json:"wokenAt,omitempty"`
}

// WakeRequestedAtAnnotation on a GooseAgent asks the operator to wake it.
// Its value is an RFC 3339 time (nanoseconds allowed); the activator writes
// it when a request arrives for a parked agent. A time not after
// status.idle.parkedAt is stale and ignored, and an agent parked by hand
// (spec.idle.parked) is never woken by it.
const WakeRequestedAtAnnotation = "agents.adk2goose.dev/wake-requested-at"

// BudgetStatus is a token budget's use in its current period.
type BudgetStatus struct {
	// Period the figures are for.
	Period BudgetPeriod `json:"period"`
	// PeriodStart is when the current period began.
	PeriodStart metav1.Time `json:"periodStart"`
	// ResetsAt is when the current period ends and the budget is whole again.
	ResetsAt metav1.Time `json:"resetsAt"`
	// Used counts the tokens all replicas used in the period.
	Used TokenStats `json:"used"`
}

// Endpoints are the in-cluster URLs of an agent.
type Endpoints struct {
	// REST is the base URL of the ADK REST API (/run_sse, /apps/..., and the ADK web UI's backendUrl).
	// +optional
	REST string `json:"rest,omitempty"`
	// AgentCard is the URL of the A2A agent card.
	// +optional
	AgentCard string `json:"agentCard,omitempty"`
}

// SessionStats counts sessions.
type SessionStats struct {
	// Total is the number of sessions that exist.
	Total int64 `json:"total"`
	// Active is the number of sessions with a reply in flight or used recently.
	Active int64 `json:"active"`
	// Users is the number of distinct ADK users with a session (in modes
	// kubernetes and oidc, the callers who used the agent), each counted
	// once across the replicas (exact while no replica has more than 1,000).
	// +optional
	Users int64 `json:"users,omitempty"`
}

// TokenStats counts tokens.
type TokenStats struct {
	// Input tokens (prompt).
	Input int64 `json:"input"`
	// Output tokens (completion).
	Output int64 `json:"output"`
	// Total tokens.
	Total int64 `json:"total"`
}

// Condition types.
const (
	// ConditionReady: the agent serves requests.
	ConditionReady = "Ready"
	// ConditionProgressing: a rollout or scale is under way.
	ConditionProgressing = "Progressing"
	// ConditionDegraded: something keeps the agent from its desired state.
	ConditionDegraded = "Degraded"
	// ConditionStatsAvailable: sessions and tokens are fresh.
	ConditionStatsAvailable = "StatsAvailable"
	// ConditionBudgetExhausted: spec.budget is spent for the current period
	// and new turns are refused. Present only with a budget.
	ConditionBudgetExhausted = "BudgetExhausted"
	// ConditionParked: the agent is scaled to zero pods by spec.idle, and
	// its Service points at the activator. Present only with spec.idle.
	ConditionParked = "Parked"
)

// Condition reasons. They are fixed so that tools can match on them.
const (
	ReasonAvailable         = "Available"
	ReasonReconciling       = "Reconciling"
	ReasonRolloutInProgress = "RolloutInProgress"
	ReasonRolloutComplete   = "RolloutComplete"
	ReasonPodsNotReady      = "PodsNotReady"
	ReasonScaledToZero      = "ScaledToZero"
	ReasonReferenceNotFound = "ReferenceNotFound"
	ReasonApplyFailed       = "ApplyFailed"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonAsExpected        = "AsExpected"
	ReasonStatsCollected    = "StatsCollected"
	ReasonStatsStale        = "StatsStale"
	ReasonStatsNotCollected = "NotCollectedYet"
	ReasonBudgetSpent       = "BudgetSpent"
	ReasonWithinBudget      = "WithinBudget"
	// Parking (the Parked condition; Ready is False with ReasonParked).
	ReasonIdle          = "Idle"          // parked: no turn for spec.idle.after
	ReasonParkRequested = "ParkRequested" // parked: spec.idle.parked
	ReasonWaking        = "Waking"        // woken, the Service reaches no ready pod yet
	ReasonAwake         = "Awake"         // not parked, a pod ready or none asked for
	ReasonParked        = "Parked"
	// Pod problems: the message names the pod, the container and the
	// kubelet's or scheduler's own words.
	ReasonImagePullFailed       = "ImagePullFailed"
	ReasonCrashLoopBackOff      = "CrashLoopBackOff"
	ReasonContainerCreateFailed = "ContainerCreateFailed"
	ReasonUnschedulable         = "Unschedulable"
	ReasonVolumeClaimUnbound    = "VolumeClaimUnbound"
	// ReasonRuntimeMissing: a stdio extension runs a runtime command (npx,
	// uvx, ...) that no spec.runtimes entry provides.
	ReasonRuntimeMissing = "RuntimeMissing"
)

// GooseAgent runs a goose server with the adk2goose sidecar, which serves it
// as a Google ADK agent over the ADK REST API and A2A.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ga;gagent,categories=goose
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.provider.model`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions.total`
// +kubebuilder:printcolumn:name="Tokens",type=integer,JSONPath=`.status.tokens.total`
// +kubebuilder:printcolumn:name="Parked",type=string,JSONPath=`.status.conditions[?(@.type=="Parked")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.server.flavor`,priority=1
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.sessions.active`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoints.rest`,priority=1
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.budget.used.total`,priority=1,description="Tokens used in the current budget period, all replicas"
// +kubebuilder:printcolumn:name="Budget",type=integer,JSONPath=`.spec.budget.totalTokens`,priority=1,description="Token budget per period"
// +kubebuilder:printcolumn:name="Period",type=string,JSONPath=`.spec.budget.period`,priority=1
// +kubebuilder:printcolumn:name="Parked-At",type=date,JSONPath=`.status.idle.parkedAt`,priority=1,description="When the agent was parked"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 47 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 47 characters starting with a letter: it names the agent's StatefulSet, Services and volume claims",fieldPath=".metadata"
type GooseAgent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	// +required
	Spec GooseAgentSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status GooseAgentStatus `json:"status,omitempty"`
}

// GooseAgentList is a list of GooseAgents.
// +kubebuilder:object:root=true
type GooseAgentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GooseAgent `json:"items"`
}
