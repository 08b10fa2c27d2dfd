// Package render turns a GooseAgent and the values it references into the
// desired child objects, as server-side-apply configurations. It is pure: no
// client, no clock, no randomness; the reconciler resolves every input first.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"reflect"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	discoveryv1ac "k8s.io/client-go/applyconfigurations/discovery/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	netv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/sidecar/identity"
)

// Fixed names, paths and ports of the agent pod.
const (
	// ConfigHashAnnotation on the pod template changes whenever the rendered
	// config or any referenced value changes, so the pods roll.
	ConfigHashAnnotation = "agents.adk2goose.dev/config-hash"

	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"
	// AppName and ManagedBy are the values of the name and managed-by labels.
	AppName   = "goose-agent"
	ManagedBy = "goose-operator"

	GooseContainer   = "goose"
	InitContainer    = "goose-init"
	SidecarContainer = "adk2goose"
	PortName         = "http"

	// GoosePortServe is `goose serve`'s default port; GoosePortGoosed is goosed's.
	GoosePortServe  = 3284
	GoosePortGoosed = 3000

	DataVolume      = "data"
	DataMountPath   = "/data"
	GoosePathRoot   = "/data/goose"
	SidecarDataDir  = "/data/adk2goose"
	HomeDir         = "/home/goose"
	GooseConfigDir  = "/etc/goose" // goose reads /etc/goose/config.yaml as its system config layer
	SecretConfigDir = "/etc/goose-operator/secret-config"
	InstructionsDir = "/etc/goose-operator/instructions"
	BudgetDir       = "/etc/adk2goose/budget"
	GooseSecretDir  = "/var/run/adk2goose/goose"
	// RuntimesDir holds spec.runtimes, one image volume per runtime.
	RuntimesDir = "/opt/goose-runtimes"
	// ImagePath is the PATH of the goose image (Debian's default), which a
	// PATH set for runtimes must keep.
	ImagePath    = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	AuthTokenDir = "/var/run/adk2goose/auth"
	// DrainDir is where goose's preStop hook asks the sidecar to drain
	// (internal/prestop); both containers mount it.
	DrainDir = "/var/run/adk2goose/drain"
	// WorkspaceSeedDir is where the sidecar sees spec.workspace.seed's ConfigMap.
	WorkspaceSeedDir = "/etc/adk2goose/workspace-seed"

	// Keys of the generated Secret <agent>-adk2goose.
	KeyGooseSecret  = "goose-secret-key"
	KeyAuthToken    = "auth-token"
	KeySecretConfig = "extensions-config.yaml"
	// Keys of the rendered ConfigMap <agent>-goose-config.
	KeyConfig       = "config.yaml"
	KeyInstructions = "goosehints"
	// KeyBudget is spec.budget as JSON, read by the sidecar. It is not in the
	// config hash: a mounted ConfigMap key is updated in place, and the
	// sidecar re-reads it, so changing the budget restarts nothing.
	KeyBudget = "budget.json"
	// KeyAuth is how the sidecar verifies callers (identity.Settings), in
	// modes kubernetes and oidc. It is in the config hash: the sidecar reads
	// it at start.
	KeyAuth = "auth.json"
	// AuthConfigDir is where the sidecar reads KeyAuth.
	AuthConfigDir = "/etc/adk2goose/auth"
	// APIAccessDir is where the sidecar alone, in mode kubernetes, gets its
	// ServiceAccount's token for the review APIs (client-go's in-cluster
	// path); the pod does not mount one, so goose never sees it.
	APIAccessDir = "/var/run/secrets/kubernetes.io/serviceaccount"

	// PodUID is the goose image's user (uid 1000); the pod runs as it so that
	// runAsNonRoot can be verified for images with a named USER.
	PodUID = 1000

	defaultExtensionTimeout = 300
)

// Defaults are the operator-wide settings (manager flags).
type Defaults struct {
	// GooseImage is used for flavor serve when spec.server.image is unset.
	GooseImage string
	// SidecarImage is used when spec.sidecar.image is unset.
	SidecarImage string
	// ActivatorPeer, when set, selects the activator's pods: an agent's
	// NetworkPolicy with spec.networkPolicy.from admits them too, so that
	// the activator can pass held requests on to a woken pod.
	ActivatorPeer *ActivatorPeer
}

// ActivatorPeer is the activator's pods as a NetworkPolicy peer.
type ActivatorPeer struct {
	Namespace string
	Pods      metav1.LabelSelector
}

// Generated holds the values the operator generates once and keeps in the
// <agent>-adk2goose Secret.
type Generated struct {
	GooseSecretKey string
	// AuthToken is empty when spec.sidecar.auth.tokenSecretRef is set.
	AuthToken string
}

// Inputs is everything Build needs.
type Inputs struct {
	Agent     *agentsv1alpha1.GooseAgent
	Defaults  Defaults
	Generated Generated
	// Values holds the value of every required Ref of References(Agent), and
	// of the optional ones that exist.
	Values map[Ref]string
	// Parked renders the agent parked: no pods, and a Service without a
	// selector, so that the endpoints controllers leave it to ActivatorSlice.
	Parked bool
	// Activator, when set, renders ActivatorSlice: the agent's Service then
	// sends requests to these activator pods. Set while the agent is parked
	// and, after a wake, until one of its pods is ready.
	Activator *Activator
}

// Activator is where the activator listens: the ready pods that run it and
// its port.
type Activator struct {
	Port int32
	Pods []ActivatorPod
}

// ActivatorPod is one ready pod running the activator.
type ActivatorPod struct {
	Namespace, Name, IP string
}

// Desired is the set of children of one agent: every apply-configuration
// field is a child, in the order they are applied (dependencies first). A
// new child is a new field here, whose kind must be among the operator's
// child kinds (controllers/children.go).
type Desired struct {
	Secret    *corev1ac.SecretApplyConfiguration
	ConfigMap *corev1ac.ConfigMapApplyConfiguration
	// ActivatorSlice points the Service at the activator; nil unless
	// Inputs.Activator is set. It comes before the Service so that a
	// parking agent's Service has the activator before it loses its pods.
	ActivatorSlice  *discoveryv1ac.EndpointSliceApplyConfiguration
	Service         *corev1ac.ServiceApplyConfiguration
	HeadlessService *corev1ac.ServiceApplyConfiguration
	// ServiceAccount is the sidecar's in mode kubernetes (unless
	// spec.podTemplate.serviceAccountName names one); nil otherwise.
	ServiceAccount *corev1ac.ServiceAccountApplyConfiguration
	StatefulSet    *appsv1ac.StatefulSetApplyConfiguration
	// NetworkPolicy is nil unless spec.networkPolicy is set.
	NetworkPolicy *netv1ac.NetworkPolicyApplyConfiguration
	// ConfigHash is the pod-template annotation value.
	ConfigHash string
}

// Objects lists the children, the apply-configuration fields of d that are
// set, in field order. Reading the fields keeps the list from missing one.
func (d *Desired) Objects() []runtime.ApplyConfiguration {
	v := reflect.ValueOf(d).Elem()
	var out []runtime.ApplyConfiguration
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() || (f.Kind() == reflect.Pointer && f.IsNil()) {
			continue
		}
		if ac, ok := reflect.TypeAssert[runtime.ApplyConfiguration](f); ok {
			out = append(out, ac)
		}
	}
	return out
}

// InvalidSpecError is a spec the API accepted but the builder cannot render.
// Retrying does not help; the user must change the spec.
type InvalidSpecError struct{ msg string }

func (e *InvalidSpecError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &InvalidSpecError{msg: fmt.Sprintf(format, args...)}
}

// IsInvalidSpec tells whether err comes from an unrenderable spec.
func IsInvalidSpec(err error) bool {
	var e *InvalidSpecError
	return errors.As(err, &e)
}

// Child names.
func SecretName(a *agentsv1alpha1.GooseAgent) string    { return a.Name + "-adk2goose" }
func ConfigMapName(a *agentsv1alpha1.GooseAgent) string { return a.Name + "-goose-config" }
func ServiceName(a *agentsv1alpha1.GooseAgent) string   { return a.Name }
func HeadlessServiceName(a *agentsv1alpha1.GooseAgent) string {
	return a.Name + "-headless"
}
func StatefulSetName(a *agentsv1alpha1.GooseAgent) string { return a.Name }

// ServiceAccountName is the sidecar's rendered ServiceAccount in mode
// kubernetes.
func ServiceAccountName(a *agentsv1alpha1.GooseAgent) string { return a.Name + "-adk2goose" }

// SidecarServiceAccount is the pods' ServiceAccount in mode kubernetes:
// spec.podTemplate.serviceAccountName, else the rendered one.
func SidecarServiceAccount(a *agentsv1alpha1.GooseAgent) string {
	if n := a.Spec.PodTemplate.ServiceAccountName; n != "" {
		return n
	}
	return ServiceAccountName(a)
}

// ReviewBindingName is the ClusterRoleBinding that lets the sidecar of an
// agent in mode kubernetes review tokens and access.
func ReviewBindingName(a *agentsv1alpha1.GooseAgent) string {
	return "adk2goose:" + a.Namespace + ":" + a.Name
}

// IsKubernetesMode reports an agent in mode kubernetes.
func IsKubernetesMode(a *agentsv1alpha1.GooseAgent) bool {
	return authMode(a) == agentsv1alpha1.AuthModeKubernetes
}

// Audience is the audience clients' tokens must name in mode kubernetes.
func Audience(a *agentsv1alpha1.GooseAgent) string {
	if k := a.Spec.Sidecar.Auth.Kubernetes; k != nil && k.Audience != "" {
		return k.Audience
	}
	return agentsv1alpha1.GroupVersion.Group + "/" + a.Namespace + "/" + a.Name
}

func authMode(a *agentsv1alpha1.GooseAgent) agentsv1alpha1.AuthMode {
	if m := a.Spec.Sidecar.Auth.Mode; m != "" {
		return m
	}
	return agentsv1alpha1.AuthModeToken
}

// AuthSettings is how the agent's sidecar verifies callers (its auth
// file); nil in token mode, where the shared token alone does.
func AuthSettings(a *agentsv1alpha1.GooseAgent) *identity.Settings { return authSettings(a) }

// authSettings is the sidecar's auth file; nil in token mode.
func authSettings(a *agentsv1alpha1.GooseAgent) *identity.Settings {
	auth := a.Spec.Sidecar.Auth
	s := &identity.Settings{Mode: string(authMode(a)), AdminGroups: auth.AdminGroups}
	switch authMode(a) {
	case agentsv1alpha1.AuthModeKubernetes:
		s.Kubernetes = &identity.KubernetesConfig{Audience: Audience(a), Namespace: a.Namespace, Agent: a.Name}
	case agentsv1alpha1.AuthModeOIDC:
		if o := auth.OIDC; o != nil {
			s.OIDC = &identity.OIDCConfig{
				IssuerURL: o.IssuerURL, Audience: o.Audience, UserClaim: o.UserClaim, GroupsClaim: o.GroupsClaim,
				AllowedUsers: o.AllowedUsers, AllowedGroups: o.AllowedGroups,
			}
		}
	default:
		return nil
	}
	return s
}
func NetworkPolicyName(a *agentsv1alpha1.GooseAgent) string { return a.Name }

// SelectorLabels select the agent's pods; they never change.
func SelectorLabels(a *agentsv1alpha1.GooseAgent) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: a.Name}
}

// Labels go on every child.
func Labels(a *agentsv1alpha1.GooseAgent) map[string]string {
	l := SelectorLabels(a)
	l[LabelManagedBy] = ManagedBy
	l[LabelComponent] = "agent"
	return l
}

// Port is the sidecar port, the only one exposed.
func Port(a *agentsv1alpha1.GooseAgent) int32 {
	if a.Spec.Sidecar.Port != 0 {
		return a.Spec.Sidecar.Port
	}
	return 8080
}

// RESTEndpoint is the in-cluster base URL of the ADK REST API.
func RESTEndpoint(a *agentsv1alpha1.GooseAgent) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", ServiceName(a), a.Namespace, Port(a))
}

// AgentCardEndpoint is the URL of the A2A agent card.
func AgentCardEndpoint(a *agentsv1alpha1.GooseAgent) string {
	return RESTEndpoint(a) + "/.well-known/agent-card.json"
}

func flavor(a *agentsv1alpha1.GooseAgent) agentsv1alpha1.ServerFlavor {
	if a.Spec.Server.Flavor == "" {
		return agentsv1alpha1.ServerFlavorServe
	}
	return a.Spec.Server.Flavor
}

func goosePort(a *agentsv1alpha1.GooseAgent) int32 {
	if flavor(a) == agentsv1alpha1.ServerFlavorGoosed {
		return GoosePortGoosed
	}
	return GoosePortServe
}

func mode(a *agentsv1alpha1.GooseAgent) agentsv1alpha1.Mode {
	if a.Spec.Mode == "" {
		return agentsv1alpha1.ModeAuto
	}
	return a.Spec.Mode
}

func workspacePath(a *agentsv1alpha1.GooseAgent) string {
	if a.Spec.Workspace.MountPath != "" {
		return a.Spec.Workspace.MountPath
	}
	return "/workspace"
}

// workspaceArgs tell the sidecar how to lay out the workspace (package
// sidecar/workspace), with the API's defaults for unset fields.
func workspaceArgs(a *agentsv1alpha1.GooseAgent) []string {
	w := &a.Spec.Workspace
	scope := w.Scope
	if scope == "" {
		scope = agentsv1alpha1.WorkspaceScopeSession
	}
	retention := agentsv1alpha1.DefaultWorkspaceRetention
	if w.Retention != nil {
		retention = w.Retention.Duration
	}
	args := []string{"--workspace-scope=" + string(scope), "--workspace-retention=" + retention.String()}
	if w.Seed != nil {
		args = append(args, "--workspace-seed-dir="+WorkspaceSeedDir)
	}
	return args
}

// providerKeyEnv maps a provider id to the variable goose reads its API key
// from; unknown providers follow goose's <PROVIDER>_API_KEY convention.
func providerKeyEnv(provider string) string {
	switch provider {
	case "databricks":
		return "DATABRICKS_TOKEN"
	case "azure_openai":
		return "AZURE_OPENAI_API_KEY"
	}
	return strings.ToUpper(provider) + "_API_KEY"
}

// providerURLKey maps a provider id to the config key of its endpoint.
func providerURLKey(provider string) string {
	if provider == "azure_openai" {
		return "AZURE_OPENAI_ENDPOINT"
	}
	return strings.ToUpper(provider) + "_HOST"
}

// Build renders the desired children. It fails with an InvalidSpecError for
// specs it cannot render, and with a plain error when a required value is
// missing from in.Values (the caller resolves them first).
func Build(in Inputs) (*Desired, error) {
	a := in.Agent
	if a == nil {
		return nil, errors.New("failed to render children: no GooseAgent")
	}
	for _, r := range References(a) {
		if _, ok := in.Values[r]; !ok && !r.Optional {
			return nil, fmt.Errorf("failed to render children: unresolved reference %s", r)
		}
	}
	if in.Generated.GooseSecretKey == "" {
		return nil, errors.New("failed to render children: no goose secret key")
	}
	if a.Spec.Sidecar.Auth.TokenSecretRef == nil && in.Generated.AuthToken == "" {
		return nil, errors.New("failed to render children: no sidecar auth token")
	}

	cfg, err := renderConfig(a)
	if err != nil {
		return nil, err
	}
	secretCfg, err := renderSecretConfig(a, in.Values)
	if err != nil {
		return nil, err
	}
	env, err := gooseEnv(a, secretCfg != "")
	if err != nil {
		return nil, err
	}

	d := &Desired{}
	d.Secret = buildSecret(a, in.Generated, secretCfg)
	d.ConfigMap, err = buildConfigMap(a, cfg)
	if err != nil {
		return nil, err
	}
	d.ConfigHash = configHash(a, cfg, secretCfg, d.ConfigMap.Data[KeyAuth], in)
	if authMode(a) == agentsv1alpha1.AuthModeKubernetes && a.Spec.PodTemplate.ServiceAccountName == "" {
		d.ServiceAccount = corev1ac.ServiceAccount(ServiceAccountName(a), a.Namespace).
			WithLabels(Labels(a)).
			WithOwnerReferences(ownerRef(a)).
			WithAutomountServiceAccountToken(false)
	}
	if in.Activator != nil {
		d.ActivatorSlice = buildActivatorSlice(a, in.Activator)
	}
	d.Service = buildService(a, false, in.Parked)
	d.HeadlessService = buildService(a, true, false)
	sts, err := buildStatefulSet(a, in.Defaults, env, d.ConfigHash, in.Parked)
	if err != nil {
		return nil, err
	}
	d.StatefulSet = sts
	if a.Spec.NetworkPolicy != nil {
		np, err := buildNetworkPolicy(a, in.Defaults)
		if err != nil {
			return nil, err
		}
		d.NetworkPolicy = np
	}
	return d, nil
}

func ownerRef(a *agentsv1alpha1.GooseAgent) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(agentsv1alpha1.GroupVersion.String()).
		WithKind("GooseAgent").
		WithName(a.Name).
		WithUID(a.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// configHash covers the rendered config, the generated values and every
// referenced value, in a fixed order.
func configHash(a *agentsv1alpha1.GooseAgent, cfg, secretCfg, authConfig string, in Inputs) string {
	h := sha256.New()
	write := func(k, v string) {
		// Length-prefixing keeps "ab"+"c" apart from "a"+"bc".
		_, _ = fmt.Fprintf(h, "%d:%s=%d:%s\n", len(k), k, len(v), v) // a hash never fails to write
	}
	write("config.yaml", cfg)
	write("secret-config.yaml", secretCfg)
	write("instructions", a.Spec.Instructions)
	if authConfig != "" { // a token-mode agent's hash stays what it was
		write("auth", authConfig)
	}
	write("generated/goose-secret-key", in.Generated.GooseSecretKey)
	if a.Spec.Sidecar.Auth.TokenSecretRef == nil { // else the user's token is among the references
		write("generated/auth-token", in.Generated.AuthToken)
	}
	for _, r := range References(a) {
		if v, ok := in.Values[r]; ok {
			write(r.String(), v)
		} else {
			write(r.String(), "<absent>")
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func buildSecret(a *agentsv1alpha1.GooseAgent, g Generated, secretCfg string) *corev1ac.SecretApplyConfiguration {
	data := map[string][]byte{KeyGooseSecret: []byte(g.GooseSecretKey)}
	if a.Spec.Sidecar.Auth.TokenSecretRef == nil {
		data[KeyAuthToken] = []byte(g.AuthToken)
	}
	if secretCfg != "" {
		data[KeySecretConfig] = []byte(secretCfg)
	}
	return corev1ac.Secret(SecretName(a), a.Namespace).
		WithLabels(Labels(a)).
		WithOwnerReferences(ownerRef(a)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
}

func buildConfigMap(a *agentsv1alpha1.GooseAgent, cfg string) (*corev1ac.ConfigMapApplyConfiguration, error) {
	data := map[string]string{KeyConfig: cfg}
	if a.Spec.Instructions != "" {
		data[KeyInstructions] = a.Spec.Instructions
	}
	if b := a.Spec.Budget; b != nil {
		// The API type's JSON is the sidecar's budget file format (budget.Limits).
		j, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("failed to render budget: %w", err)
		}
		data[KeyBudget] = string(j)
	}
	if auth := authSettings(a); auth != nil {
		j, err := json.Marshal(auth)
		if err != nil {
			return nil, fmt.Errorf("failed to render auth settings: %w", err)
		}
		data[KeyAuth] = string(j)
	}
	return corev1ac.ConfigMap(ConfigMapName(a), a.Namespace).
		WithLabels(Labels(a)).
		WithOwnerReferences(ownerRef(a)).
		WithData(data), nil
}

// PlatformExtensions are goose's in-process platform extensions
// (crates/goose/src/agents/platform_extensions/mod.rs PLATFORM_EXTENSIONS).
// config/migrations.rs migrate_platform_extensions adds each one the merged
// config lacks, enabled when default_enabled (analyze, apps,
// extensionmanager, scheduler, summon, developer, tom, skills); one the
// config names keeps its enabled flag. `goose serve` also loads developer as
// a default builtin unless the config disables it (acp/server.rs
// selected_builtin_extensions; 1.43 loaded it regardless).
var PlatformExtensions = []string{
	"analyze", "apps", "chatrecall", "code_execution", "developer", "extensionmanager",
	"scheduler", "skills", "summarize", "summon", "todo", "tom",
}

// renderConfig is goose's config.yaml: the provider's endpoint and the
// extensions. Provider, model and mode are env only (gooseEnv). It never
// holds a secret: secret env values are named in env_keys and reach goose as
// container env; secret headers go to the Secret layer.
func renderConfig(a *agentsv1alpha1.GooseAgent) (string, error) {
	cfg := map[string]any{}
	if a.Spec.Provider.BaseURL != "" {
		cfg[providerURLKey(a.Spec.Provider.Name)] = a.Spec.Provider.BaseURL
	}
	exts := map[string]any{}
	for i := range a.Spec.Extensions {
		e := &a.Spec.Extensions[i]
		m := map[string]any{
			"enabled":         true,
			"type":            string(e.Type),
			"name":            e.Name,
			"description":     e.Description,
			"available_tools": []string{},
		}
		timeout := int32(defaultExtensionTimeout)
		if e.TimeoutSeconds != nil {
			timeout = *e.TimeoutSeconds
		}
		switch e.Type {
		case agentsv1alpha1.ExtensionBuiltin:
			m["timeout"] = timeout
			m["bundled"] = true
		case agentsv1alpha1.ExtensionPlatform:
			m["bundled"] = true
		case agentsv1alpha1.ExtensionStdio:
			envs := map[string]string{}
			keys := []string{}
			for _, ev := range e.Env {
				if ev.SecretKeyRef != nil {
					keys = append(keys, ev.Name)
				} else if ev.Value != nil {
					envs[ev.Name] = *ev.Value
				}
			}
			args := e.Args
			if args == nil {
				args = []string{}
			}
			m["cmd"], m["args"], m["envs"], m["env_keys"], m["timeout"] = e.Cmd, args, envs, keys, timeout
		case agentsv1alpha1.ExtensionStreamableHTTP:
			headers := map[string]string{}
			maps.Copy(headers, e.Headers)
			m["uri"], m["headers"], m["envs"], m["env_keys"], m["timeout"] = e.URI, headers, map[string]string{}, []string{}, timeout
		default:
			return "", invalid("extension %q has unknown type %q", e.Name, e.Type)
		}
		exts[e.Name] = m
	}
	// spec.extensions is the agent's whole tool list: goose's config
	// migration adds every platform extension the config does not name,
	// enabled when it is a default, so each one the spec leaves out is
	// written here disabled.
	for _, name := range PlatformExtensions {
		if _, listed := exts[name]; !listed {
			// A full ExtensionEntry: an entry that does not parse (no
			// description) is replaced by the migration with the default.
			exts[name] = map[string]any{
				"enabled": false, "type": string(agentsv1alpha1.ExtensionPlatform), "name": name,
				"description": "", "bundled": true, "available_tools": []string{},
			}
		}
	}
	cfg["extensions"] = exts
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("failed to marshal goose config: %w", err)
	}
	return string(out), nil
}

// renderSecretConfig is a second goose config layer holding the headers of
// extensions that take header values from Secrets. goose merges extension
// entries field by field, so this layer's headers map (literal and secret
// headers together) replaces the ConfigMap's. Empty when no extension needs it.
func renderSecretConfig(a *agentsv1alpha1.GooseAgent, values map[Ref]string) (string, error) {
	exts := map[string]any{}
	for i := range a.Spec.Extensions {
		e := &a.Spec.Extensions[i]
		if len(e.HeadersFrom) == 0 {
			continue
		}
		headers := map[string]string{}
		maps.Copy(headers, e.Headers)
		for _, h := range e.HeadersFrom {
			headers[h.Name] = values[Ref{Kind: KindSecret, Name: h.SecretKeyRef.Name, Key: h.SecretKeyRef.Key}]
		}
		exts[e.Name] = map[string]any{"headers": headers}
	}
	if len(exts) == 0 {
		return "", nil
	}
	out, err := yaml.Marshal(map[string]any{"extensions": exts})
	if err != nil {
		return "", fmt.Errorf("failed to marshal goose secret config: %w", err)
	}
	return string(out), nil
}

// reservedEnv are set by the operator and cannot be overridden by podTemplate.env.
var reservedEnv = map[string]bool{
	"GOOSE_SERVER__SECRET_KEY": true, "GOOSE_PATH_ROOT": true, "GOOSE_HOST": true,
	"GOOSE_PORT": true, "GOOSE_TLS": true, "GOOSE_ADDITIONAL_CONFIG_FILES": true, "HOME": true,
}

// specEnv are the variables spec fields set, by the field that sets each:
// podTemplate.env cannot be a second way to set them.
var specEnv = map[string]string{
	"GOOSE_PROVIDER": "spec.provider.name", "GOOSE_MODEL": "spec.provider.model", "GOOSE_MODE": "spec.mode",
}

func envValue(name, value string) *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName(name).WithValue(value)
}

func envSecret(name string, ref agentsv1alpha1.SecretKeyRef) *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
		WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(ref.Name).WithKey(ref.Key)))
}

// gooseEnv is the goose container's environment. Secret values come in as
// secretKeyRef, never as literals.
func gooseEnv(a *agentsv1alpha1.GooseAgent, secretLayer bool) ([]*corev1ac.EnvVarApplyConfiguration, error) {
	var env []*corev1ac.EnvVarApplyConfiguration
	byName := map[string]int{}
	// secretSrc remembers where a secret variable comes from, to reject two
	// different sources for one name (goose looks env_keys up by name).
	secretSrc := map[string]agentsv1alpha1.SecretKeyRef{}
	add := func(e *corev1ac.EnvVarApplyConfiguration) {
		byName[*e.Name] = len(env)
		env = append(env, e)
	}
	addSecret := func(name string, ref agentsv1alpha1.SecretKeyRef, what string) error {
		if prev, ok := secretSrc[name]; ok {
			if prev != ref {
				return invalid("environment variable %s (%s) is set from both Secret %s key %s and Secret %s key %s", name, what, prev.Name, prev.Key, ref.Name, ref.Key)
			}
			return nil
		}
		if _, ok := byName[name]; ok || reservedEnv[name] {
			return invalid("environment variable %s (%s) clashes with a variable the operator sets", name, what)
		}
		secretSrc[name] = ref
		add(envSecret(name, ref))
		return nil
	}

	add(envSecret("GOOSE_SERVER__SECRET_KEY", agentsv1alpha1.SecretKeyRef{Name: SecretName(a), Key: KeyGooseSecret}))
	add(envValue("GOOSE_PATH_ROOT", GoosePathRoot))
	add(envValue("HOME", HomeDir))
	add(envValue("GOOSE_DISABLE_KEYRING", "1"))
	add(envValue("GOOSE_TELEMETRY_ENABLED", "false"))
	add(envValue("GOOSE_TELEMETRY_OFF", "1"))
	// Provider, model and mode reach goose here and nowhere else. goose reads
	// the environment before any config.yaml (config/base.rs get_param;
	// providers.rs get_active_provider, get_active_model), so neither a
	// config.yaml goose writes on the data volume nor its legacy-key handling
	// can shadow the spec. New sessions take GOOSE_MODE as their mode (acp
	// new_session.rs, goosed /agent/start), so the sidecar need not set it.
	add(envValue("GOOSE_PROVIDER", a.Spec.Provider.Name))
	add(envValue("GOOSE_MODEL", a.Spec.Provider.Model))
	add(envValue("GOOSE_MODE", string(mode(a))))
	if flavor(a) == agentsv1alpha1.ServerFlavorGoosed {
		add(envValue("GOOSE_HOST", "127.0.0.1"))
		add(envValue("GOOSE_PORT", strconv.Itoa(GoosePortGoosed)))
	}
	add(envValue("GOOSE_TLS", "false"))
	if secretLayer {
		add(envValue("GOOSE_ADDITIONAL_CONFIG_FILES", SecretConfigDir+"/"+KeyConfig))
	}
	if p := runtimePath(a); p != "" {
		// goose starts stdio extensions with its own environment.
		add(envValue("PATH", p))
	}
	if r := a.Spec.Provider.APIKeySecretRef; r != nil {
		if err := addSecret(providerKeyEnv(a.Spec.Provider.Name), *r, "spec.provider.apiKeySecretRef"); err != nil {
			return nil, err
		}
	}
	for _, e := range a.Spec.Provider.Env {
		if err := addSecret(e.Name, e.SecretKeyRef, "spec.provider.env"); err != nil {
			return nil, err
		}
	}
	for _, ext := range a.Spec.Extensions {
		for _, e := range ext.Env {
			if e.SecretKeyRef == nil {
				continue
			}
			if err := addSecret(e.Name, *e.SecretKeyRef, "spec.extensions["+ext.Name+"].env"); err != nil {
				return nil, err
			}
		}
	}
	for i := range a.Spec.PodTemplate.Env {
		u := a.Spec.PodTemplate.Env[i]
		if reservedEnv[u.Name] {
			return nil, invalid("spec.podTemplate.env cannot set %s: the operator manages it", u.Name)
		}
		if field, ok := specEnv[u.Name]; ok {
			return nil, invalid("spec.podTemplate.env cannot set %s: %s sets it", u.Name, field)
		}
		if _, ok := secretSrc[u.Name]; ok {
			return nil, invalid("spec.podTemplate.env cannot set %s: it is already set from a Secret elsewhere in the spec", u.Name)
		}
		ac, err := convert[corev1ac.EnvVarApplyConfiguration](u)
		if err != nil {
			return nil, err
		}
		if i, ok := byName[u.Name]; ok {
			env[i] = ac // the user's value replaces an operator default (e.g. GOOSE_TELEMETRY_ENABLED)
			continue
		}
		add(ac)
	}
	return env, nil
}

// convert copies an API type into its apply configuration via JSON; both
// share the same JSON shape.
func convert[T any](in any) (*T, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal %T: %w", in, err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("failed to unmarshal into %T: %w", out, err)
	}
	return out, nil
}

func restrictedContainer() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithAllowPrivilegeEscalation(false).
		WithReadOnlyRootFilesystem(true).
		WithRunAsNonRoot(true).
		WithCapabilities(corev1ac.Capabilities().WithDrop(corev1.Capability("ALL"))).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
}

func mount(name, path string, readOnly bool) *corev1ac.VolumeMountApplyConfiguration {
	m := corev1ac.VolumeMount().WithName(name).WithMountPath(path)
	if readOnly {
		m.WithReadOnly(true)
	}
	return m
}

func keyToPath(key, path string) *corev1ac.KeyToPathApplyConfiguration {
	return corev1ac.KeyToPath().WithKey(key).WithPath(path)
}

const (
	modeConfig = int32(0o444)
	modeSecret = int32(0o440) // readable through fsGroup, not by others
)

// telemetryEnv is spec.telemetry as the standard OTEL_* environment, which
// adk2goose (through adk-go's telemetry package) and goose both read. Header
// values come from Secrets through env vars that OTEL_EXPORTER_OTLP_HEADERS
// names with Kubernetes' $(VAR) expansion, so no secret is rendered.
func telemetryEnv(a *agentsv1alpha1.GooseAgent) []*corev1ac.EnvVarApplyConfiguration {
	t := a.Spec.Telemetry
	if t == nil {
		return nil
	}
	env := []*corev1ac.EnvVarApplyConfiguration{envValue("OTEL_EXPORTER_OTLP_ENDPOINT", t.Endpoint)}
	var headers []string
	for i, h := range t.HeadersFrom {
		name := fmt.Sprintf("ADK2GOOSE_OTLP_HEADER_%d", i)
		env = append(env, envSecret(name, h.SecretKeyRef))
		headers = append(headers, h.Name+"=$("+name+")")
	}
	if len(headers) > 0 {
		env = append(env, envValue("OTEL_EXPORTER_OTLP_HEADERS", strings.Join(headers, ",")))
	}
	percent := int32(100)
	if t.SamplingPercent != nil {
		percent = *t.SamplingPercent
	}
	return append(env,
		envValue("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
		envValue("OTEL_TRACES_SAMPLER_ARG", strconv.FormatFloat(float64(percent)/100, 'f', -1, 64)),
		envValue("OTEL_RESOURCE_ATTRIBUTES", "k8s.namespace.name="+a.Namespace+",gooseagent.name="+a.Name))
}

func runtimeVolume(name string) string { return "runtime-" + name }

// runtimePath is goose's PATH with every runtime's bin directory first, in
// spec order; "" without runtimes.
func runtimePath(a *agentsv1alpha1.GooseAgent) string {
	if len(a.Spec.Runtimes) == 0 {
		return ""
	}
	var dirs []string
	for _, rt := range a.Spec.Runtimes {
		bin := rt.BinPath
		if bin == "" {
			bin = "bin"
		}
		dirs = append(dirs, path.Clean(RuntimesDir+"/"+rt.Name+"/"+bin))
	}
	return strings.Join(append(dirs, ImagePath), ":")
}

// runtimeCommands are commands of language runtimes that MCP servers are
// commonly started with, none of which the official goose image has (Debian
// bookworm-slim with goose, git and curl).
var runtimeCommands = map[string]bool{
	"node": true, "npm": true, "npx": true, "pnpm": true, "yarn": true, "bun": true, "bunx": true, "deno": true,
	"uv": true, "uvx": true, "python": true, "python3": true, "pip": true, "pip3": true, "pipx": true,
}

// MissingRuntimes says which stdio extensions run a runtime command that no
// spec.runtimes entry provides, or "" when none does. With spec.server.image
// set the image is the user's and may have them, so nothing is reported.
func MissingRuntimes(a *agentsv1alpha1.GooseAgent) string {
	if a.Spec.Server.Image != "" {
		return ""
	}
	provided := map[string]bool{}
	for _, rt := range a.Spec.Runtimes {
		for _, c := range rt.Commands {
			provided[c] = true
		}
	}
	var missing []string
	for _, e := range a.Spec.Extensions {
		if e.Type != agentsv1alpha1.ExtensionStdio {
			continue
		}
		cmd := path.Base(e.Cmd)
		if runtimeCommands[cmd] && !provided[cmd] {
			missing = append(missing, fmt.Sprintf("spec.extensions[%s].cmd %s", e.Name, e.Cmd))
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return strings.Join(missing, ", ") + ": the goose image has no such runtime; add a spec.runtimes entry whose commands include it"
}

func hasSecretHeaders(a *agentsv1alpha1.GooseAgent) bool {
	for _, e := range a.Spec.Extensions {
		if len(e.HeadersFrom) > 0 {
			return true
		}
	}
	return false
}

// instructionsVolume mounts the instructions from where they live: the
// rendered ConfigMap (inline), or the user's ConfigMap or Secret, so a Secret
// value is never copied into a ConfigMap.
func instructionsVolume(a *agentsv1alpha1.GooseAgent) *corev1ac.VolumeApplyConfiguration {
	switch f := a.Spec.InstructionsFrom; {
	case a.Spec.Instructions != "":
		return configMapKeyVolume(volInstructions, ConfigMapName(a), KeyInstructions, KeyInstructions)
	case f != nil && f.ConfigMapKeyRef != nil:
		return configMapKeyVolume(volInstructions, f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key, KeyInstructions)
	case f != nil && f.SecretKeyRef != nil:
		return secretKeyVolume(volInstructions, f.SecretKeyRef.Name, f.SecretKeyRef.Key, KeyInstructions)
	}
	return nil
}

// defaultStorageSize matches the CRD default, for objects that bypassed defaulting.
var defaultStorageSize = resource.MustParse("1Gi")

func storageSize(a *agentsv1alpha1.GooseAgent) resource.Quantity {
	if s := a.Spec.Storage.Size; s != nil && !s.IsZero() {
		return *s
	}
	return defaultStorageSize
}

// buildService is the agent's Service, or with headless its headless one.
// A parked agent's Service has no selector: its endpoints are then the
// activator's slice alone.
func buildService(a *agentsv1alpha1.GooseAgent, headless, parked bool) *corev1ac.ServiceApplyConfiguration {
	name := ServiceName(a)
	spec := corev1ac.ServiceSpec()
	if !parked {
		spec.WithSelector(SelectorLabels(a))
	}
	spec.WithPorts(corev1ac.ServicePort().
		WithName(PortName).
		WithProtocol(corev1.ProtocolTCP).
		WithAppProtocol("http").
		WithPort(Port(a)).
		WithTargetPort(intstr.FromString(PortName)))
	if headless {
		name = HeadlessServiceName(a)
		// Peers reach a session's owning pod by its stable DNS name, ready or not.
		spec.WithClusterIP(corev1.ClusterIPNone).WithPublishNotReadyAddresses(true)
	} else {
		spec.WithType(corev1.ServiceTypeClusterIP)
	}
	return corev1ac.Service(name, a.Namespace).
		WithLabels(Labels(a)).
		WithOwnerReferences(ownerRef(a)).
		WithSpec(spec)
}

// ActivatorSliceName names the EndpointSlice that points a parked agent's
// Service at the activator.
func ActivatorSliceName(a *agentsv1alpha1.GooseAgent) string { return a.Name + "-activator" }

// SliceManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// activator's slices; the EndpointSlice controllers leave slices with another
// value alone.
const SliceManagedBy = "goose-operator.adk2goose.dev"

func buildActivatorSlice(a *agentsv1alpha1.GooseAgent, act *Activator) *discoveryv1ac.EndpointSliceApplyConfiguration {
	labels := Labels(a)
	labels[discoveryv1.LabelServiceName] = ServiceName(a)
	labels[discoveryv1.LabelManagedBy] = SliceManagedBy
	// A slice holds one address family; the first pod's decides.
	family := discoveryv1.AddressTypeIPv4
	var endpoints []*discoveryv1ac.EndpointApplyConfiguration
	for i, p := range act.Pods {
		ip, err := netip.ParseAddr(p.IP)
		if err != nil {
			continue
		}
		if i == 0 && ip.Is6() {
			family = discoveryv1.AddressTypeIPv6
		}
		if ip.Is6() != (family == discoveryv1.AddressTypeIPv6) {
			continue
		}
		endpoints = append(endpoints, discoveryv1ac.Endpoint().
			WithAddresses(ip.String()).
			WithConditions(discoveryv1ac.EndpointConditions().WithReady(true).WithServing(true).WithTerminating(false)).
			WithTargetRef(corev1ac.ObjectReference().WithKind("Pod").WithNamespace(p.Namespace).WithName(p.Name)))
	}
	return discoveryv1ac.EndpointSlice(ActivatorSliceName(a), a.Namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerRef(a)).
		WithAddressType(family).
		WithEndpoints(endpoints...).
		// The name matches the Service's port, which is how kube-proxy pairs them.
		WithPorts(discoveryv1ac.EndpointPort().
			WithName(PortName).
			WithProtocol(corev1.ProtocolTCP).
			WithAppProtocol("http").
			WithPort(act.Port))
}

func buildNetworkPolicy(a *agentsv1alpha1.GooseAgent, def Defaults) (*netv1ac.NetworkPolicyApplyConfiguration, error) {
	port := intstr.FromInt32(Port(a))
	rule := netv1ac.NetworkPolicyIngressRule().
		WithPorts(netv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(port))
	for i := range a.Spec.NetworkPolicy.From {
		peer, err := convert[netv1ac.NetworkPolicyPeerApplyConfiguration](a.Spec.NetworkPolicy.From[i])
		if err != nil {
			return nil, err
		}
		rule.WithFrom(peer)
	}
	if len(a.Spec.NetworkPolicy.From) > 0 {
		// The agent's own pods forward sessions to each other's sidecars.
		// (An empty From already admits every source.)
		rule.WithFrom(netv1ac.NetworkPolicyPeer().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(a))))
		if p := def.ActivatorPeer; p != nil {
			pods, err := convert[metav1ac.LabelSelectorApplyConfiguration](p.Pods)
			if err != nil {
				return nil, err
			}
			rule.WithFrom(netv1ac.NetworkPolicyPeer().
				WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: p.Namespace})).
				WithPodSelector(pods))
		}
	}
	return netv1ac.NetworkPolicy(NetworkPolicyName(a), a.Namespace).
		WithLabels(Labels(a)).
		WithOwnerReferences(ownerRef(a)).
		WithSpec(netv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(a))).
			WithPolicyTypes("Ingress").
			WithIngress(rule)), nil
}
