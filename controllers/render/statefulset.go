package render

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/prestop"
)

// Volumes of the agent pod besides DataVolume (the claim template's); a
// container's mounts name them.
const (
	volHome          = "home"
	volTmp           = "tmp"
	volWorkspace     = "workspace"
	volGooseConfig   = "goose-config"
	volGooseSecret   = "goose-secret"
	volAuthToken     = "auth-token"
	volSecretConfig  = "secret-config"
	volInstructions  = "instructions"
	volBudget        = "budget"
	volWorkspaceSeed = "workspace-seed"
	volDrain         = "drain"
	volAuthConfig    = "auth-config"
	volAPIAccess     = "api-access"

	// File names inside GooseSecretDir and AuthTokenDir.
	gooseSecretFile = "secret-key"
	authTokenFile   = "token"
)

// When a pod stops, the kubelet runs goose's preStop hook, then stops goose,
// then the sidecar. goose serve ends every running turn at once on SIGTERM,
// so the hook first has the sidecar drain: take no new turns and let the
// running ones finish (internal/prestop). stopTiming splits the pod's grace
// period: the drain, then ending the turns still running (5 s), the hook's
// last look (it looks once a second), and both stops.
type stopTiming struct {
	grace    int64         // terminationGracePeriodSeconds
	drain    time.Duration // the sidecar's --drain-timeout
	hookWait time.Duration // the preStop hook's own bound
}

const (
	// DefaultTerminationGracePeriod is the pods' grace period, in seconds,
	// unless spec.podTemplate.terminationGracePeriodSeconds sets it.
	DefaultTerminationGracePeriod = 60
	// drainMargin is what the drain leaves of the grace period; the API's
	// minimum of 30 s leaves 10 s to drain.
	drainMargin = 20 * time.Second
	hookMargin  = 10 * time.Second
)

func stopTimingOf(a *agentsv1alpha1.GooseAgent) stopTiming {
	grace := int64(DefaultTerminationGracePeriod)
	if g := a.Spec.PodTemplate.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	drain := time.Duration(grace)*time.Second - drainMargin
	return stopTiming{grace: grace, drain: drain, hookWait: drain + hookMargin}
}

// hintsScript installs the instructions as goose's global hints file,
// <config dir>/.goosehints, which goose adds to the system prompt of every
// session. It copies them onto the data volume (goose's config dir must stay
// writable) and removes the file when the spec has no instructions.
var hintsScript = fmt.Sprintf(`set -eu
mkdir -p %[1]s/config
if [ -f %[2]s ]; then cat %[2]s > %[3]s.tmp && mv %[3]s.tmp %[3]s; else rm -f %[3]s; fi`,
	GoosePathRoot, InstructionsDir+"/"+KeyInstructions, GoosePathRoot+"/config/.goosehints")

// buildStatefulSet is the agent's StatefulSet: the pod buildPodSpec renders,
// the config hash that rolls it, and one data volume claim per replica.
func buildStatefulSet(a *agentsv1alpha1.GooseAgent, def Defaults, env []*corev1ac.EnvVarApplyConfiguration, hash string, parked bool) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	pod, err := buildPodSpec(a, def, env)
	if err != nil {
		return nil, err
	}
	spec := appsv1ac.StatefulSetSpec().
		WithServiceName(HeadlessServiceName(a)).
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(a))).
		// Replicas hold independent sessions; no need to start them one by one.
		WithPodManagementPolicy("Parallel").
		WithTemplate(corev1ac.PodTemplateSpec().
			WithLabels(podLabels(a)).
			WithAnnotations(podAnnotations(a, hash)).
			WithSpec(pod)).
		WithVolumeClaimTemplates(dataClaimTemplate(a))
	// Unset replicas are left to whoever scales the StatefulSet (HPA, kubectl
	// scale); the apiserver defaults a new StatefulSet to 1. Parked is 0; on
	// waking, an unset count is dropped from this owner's fields and the
	// apiserver's default of 1 returns.
	switch r := a.Spec.Replicas; {
	case parked:
		spec.WithReplicas(0)
	case r != nil:
		spec.WithReplicas(*r)
	}
	return appsv1ac.StatefulSet(StatefulSetName(a), a.Namespace).
		WithLabels(Labels(a)).
		WithOwnerReferences(ownerRef(a)).
		WithSpec(spec), nil
}

// buildPodSpec is the agent pod: the init container that installs the
// instructions, the adk2goose sidecar, the goose container, their volumes,
// and spec.podTemplate's overrides. The pod gets no Kubernetes API token.
func buildPodSpec(a *agentsv1alpha1.GooseAgent, def Defaults, env []*corev1ac.EnvVarApplyConfiguration) (*corev1ac.PodSpecApplyConfiguration, error) {
	gooseImg, err := image(a.Spec.Server.Image, def.GooseImage, "spec.server.image", "goose")
	if err != nil {
		return nil, err
	}
	sidecarImg, err := image(a.Spec.Sidecar.Image, def.SidecarImage, "spec.sidecar.image", "adk2goose")
	if err != nil {
		return nil, err
	}
	volumes, err := podVolumes(a)
	if err != nil {
		return nil, err
	}
	sidecar, err := sidecarContainer(a, sidecarImg)
	if err != nil {
		return nil, err
	}
	goose, err := gooseContainer(a, gooseImg, env)
	if err != nil {
		return nil, err
	}
	sc, err := podSecurityContext(a)
	if err != nil {
		return nil, err
	}
	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		// Service links would inject GOOSE_PORT-like variables for a Service named goose.
		WithEnableServiceLinks(false).
		WithSecurityContext(sc).
		WithInitContainers(initContainer(a, gooseImg), sidecar).
		WithContainers(goose).
		WithTerminationGracePeriodSeconds(stopTimingOf(a).grace).
		WithVolumes(volumes...)
	if authMode(a) == agentsv1alpha1.AuthModeKubernetes {
		pod.WithServiceAccountName(ServiceAccountName(a)) // spec.podTemplate.serviceAccountName overrides it
	}
	if err := applyPodOverrides(pod, &a.Spec.PodTemplate); err != nil {
		return nil, err
	}
	return pod, nil
}

// image is the spec's image, else the operator's default for it.
func image(spec, def, field, program string) (string, error) {
	switch {
	case spec != "":
		return spec, nil
	case def != "":
		return def, nil
	}
	return "", invalid("%s is unset and the operator has no default %s image", field, program)
}

// podVolumes are the pod's volumes, in a fixed order.
func podVolumes(a *agentsv1alpha1.GooseAgent) ([]*corev1ac.VolumeApplyConfiguration, error) {
	ws, err := workspaceVolume(a)
	if err != nil {
		return nil, err
	}
	tokenSecret, tokenKey := SecretName(a), KeyAuthToken
	if r := a.Spec.Sidecar.Auth.TokenSecretRef; r != nil {
		tokenSecret, tokenKey = r.Name, r.Key
	}
	volumes := []*corev1ac.VolumeApplyConfiguration{
		corev1ac.Volume().WithName(volHome).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		corev1ac.Volume().WithName(volTmp).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
		ws,
		configMapKeyVolume(volGooseConfig, ConfigMapName(a), KeyConfig, KeyConfig),
		secretKeyVolume(volGooseSecret, SecretName(a), KeyGooseSecret, gooseSecretFile),
		secretKeyVolume(volAuthToken, tokenSecret, tokenKey, authTokenFile),
		corev1ac.Volume().WithName(volDrain).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
	}
	volumes = append(volumes, runtimeVolumes(a)...)
	if hasSecretHeaders(a) {
		volumes = append(volumes, secretKeyVolume(volSecretConfig, SecretName(a), KeySecretConfig, KeyConfig))
	}
	if v := instructionsVolume(a); v != nil {
		volumes = append(volumes, v)
	}
	if a.Spec.Budget != nil {
		volumes = append(volumes, configMapKeyVolume(volBudget, ConfigMapName(a), KeyBudget, KeyBudget))
	}
	if authSettings(a) != nil {
		volumes = append(volumes, configMapKeyVolume(volAuthConfig, ConfigMapName(a), KeyAuth, KeyAuth))
	}
	if authMode(a) == agentsv1alpha1.AuthModeKubernetes {
		volumes = append(volumes, apiAccessVolume())
	}
	if seed := a.Spec.Workspace.Seed; seed != nil {
		volumes = append(volumes, corev1ac.Volume().WithName(volWorkspaceSeed).WithConfigMap(
			corev1ac.ConfigMapVolumeSource().WithName(seed.ConfigMapName).WithDefaultMode(modeConfig)))
	}
	return volumes, nil
}

// apiAccessVolume is what the kubelet mounts for a pod's ServiceAccount
// (token, the cluster's CA, the namespace), for the sidecar alone: it
// creates TokenReviews and SubjectAccessReviews in mode kubernetes.
func apiAccessVolume() *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(volAPIAccess).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(modeConfig).
		WithSources(
			corev1ac.VolumeProjection().WithServiceAccountToken(corev1ac.ServiceAccountTokenProjection().
				WithPath("token").WithExpirationSeconds(3607)),
			corev1ac.VolumeProjection().WithConfigMap(corev1ac.ConfigMapProjection().
				WithName("kube-root-ca.crt").WithItems(keyToPath("ca.crt", "ca.crt"))),
			corev1ac.VolumeProjection().WithDownwardAPI(corev1ac.DownwardAPIProjection().
				WithItems(corev1ac.DownwardAPIVolumeFile().WithPath("namespace").
					WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("metadata.namespace")))),
		))
}

func configMapKeyVolume(name, configMap, key, path string) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(name).WithConfigMap(corev1ac.ConfigMapVolumeSource().
		WithName(configMap).WithItems(keyToPath(key, path)).WithDefaultMode(modeConfig))
}

func secretKeyVolume(name, secret, key, path string) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(name).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(secret).WithItems(keyToPath(key, path)).WithDefaultMode(modeSecret))
}

// workspaceVolume is spec.workspace's volume source; an emptyDir by default.
func workspaceVolume(a *agentsv1alpha1.GooseAgent) (*corev1ac.VolumeApplyConfiguration, error) {
	v := corev1ac.Volume().WithName(volWorkspace)
	switch w := &a.Spec.Workspace; {
	case w.PersistentVolumeClaim != nil:
		pvc, err := convert[corev1ac.PersistentVolumeClaimVolumeSourceApplyConfiguration](w.PersistentVolumeClaim)
		if err != nil {
			return nil, err
		}
		return v.WithPersistentVolumeClaim(pvc), nil
	case w.EmptyDir != nil:
		ed, err := convert[corev1ac.EmptyDirVolumeSourceApplyConfiguration](w.EmptyDir)
		if err != nil {
			return nil, err
		}
		return v.WithEmptyDir(ed), nil
	}
	return v.WithEmptyDir(corev1ac.EmptyDirVolumeSource()), nil
}

// runtimeVolumes are spec.runtimes' images, one image volume each.
func runtimeVolumes(a *agentsv1alpha1.GooseAgent) []*corev1ac.VolumeApplyConfiguration {
	var out []*corev1ac.VolumeApplyConfiguration
	for _, rt := range a.Spec.Runtimes {
		src := corev1ac.ImageVolumeSource().WithReference(rt.Image)
		if rt.ImagePullPolicy != "" {
			src.WithPullPolicy(rt.ImagePullPolicy)
		}
		out = append(out, corev1ac.Volume().WithName(runtimeVolume(rt.Name)).WithImage(src))
	}
	return out
}

// initContainer installs the instructions before goose starts (hintsScript).
// It runs the goose image, which has a shell.
func initContainer(a *agentsv1alpha1.GooseAgent, image string) *corev1ac.ContainerApplyConfiguration {
	mounts := []*corev1ac.VolumeMountApplyConfiguration{mount(DataVolume, DataMountPath, false)}
	if instructionsVolume(a) != nil {
		mounts = append(mounts, mount(volInstructions, InstructionsDir, true))
	}
	c := corev1ac.Container().
		WithName(InitContainer).
		WithImage(image).
		WithCommand("/bin/sh", "-c", hintsScript).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(mounts...)
	return withPullPolicy(c, a.Spec.Server.ImagePullPolicy)
}

// sidecarContainer is adk2goose as a native sidecar: an init container with
// restartPolicy Always starts before goose and stops after it, so it can
// relay a turn to its end; goose's preStop hook waits for that (stopTiming).
// Its port is the only one the pod exposes.
func sidecarContainer(a *agentsv1alpha1.GooseAgent, image string) (*corev1ac.ContainerApplyConfiguration, error) {
	c := corev1ac.Container().
		WithName(SidecarContainer).
		WithImage(image).
		WithRestartPolicy(corev1.ContainerRestartPolicyAlways).
		WithArgs(sidecarArgs(a)...).
		// apiVersion is the apiserver's default, spelled out so a resync sees no drift.
		WithEnv(corev1ac.EnvVar().WithName("POD_IP").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("status.podIP")))).
		// An environment variable, not a flag: a sidecar image from before
		// the drain handshake ignores it, and goose's hook then skips the wait.
		WithEnv(corev1ac.EnvVar().WithName("ADK2GOOSE_DRAIN_DIR").WithValue(DrainDir)).
		WithEnv(telemetryEnv(a)...).
		WithPorts(corev1ac.ContainerPort().WithName(PortName).WithContainerPort(Port(a)).WithProtocol(corev1.ProtocolTCP)).
		WithStartupProbe(httpProbe("/healthz", 1, 60)).
		WithLivenessProbe(httpProbe("/healthz", 10, 3)).
		WithReadinessProbe(httpProbe("/readyz", 5, 3)).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(sidecarMounts(a)...)
	withPullPolicy(c, a.Spec.Sidecar.ImagePullPolicy)
	if err := withResources(c, a.Spec.Sidecar.Resources); err != nil {
		return nil, err
	}
	return c, nil
}

// sidecarArgs are adk2goose's flags (cmd/adk2goose).
func sidecarArgs(a *agentsv1alpha1.GooseAgent) []string {
	args := []string{
		fmt.Sprintf("--listen=:%d", Port(a)),
		fmt.Sprintf("--goose-url=http://127.0.0.1:%d", goosePort(a)),
		"--drain-timeout=" + stopTimingOf(a).drain.String(),
		"--goose-flavor=" + string(flavor(a)),
		"--goose-secret-file=" + GooseSecretDir + "/" + gooseSecretFile,
		"--goose-working-dir=" + workspacePath(a),
		"--auth-token-file=" + AuthTokenDir + "/" + authTokenFile,
		"--data-dir=" + SidecarDataDir,
		"--public-base-url=" + RESTEndpoint(a),
		"--app-name=" + a.Name,
		// Sessions live on one pod's volume: the sidecar forwards a request for
		// another pod's session to its owner, found among the headless Service's
		// addresses (POD_IP lets it skip itself). Pods resolve the name through
		// their DNS search path, so no cluster domain.
		"--peers-host=" + HeadlessServiceName(a) + "." + a.Namespace + ".svc",
	}
	args = append(args, workspaceArgs(a)...)
	if d := a.Spec.Description; d != "" {
		args = append(args, "--description="+d)
	}
	if o := a.Spec.Sidecar.CORSAllowedOrigins; len(o) > 0 {
		args = append(args, "--cors-origins="+strings.Join(o, ","))
	}
	if a.Spec.Budget != nil {
		args = append(args, "--budget-file="+BudgetDir+"/"+KeyBudget)
	}
	if authSettings(a) != nil {
		args = append(args, "--auth-config-file="+AuthConfigDir+"/"+KeyAuth)
	}
	return args
}

// sidecarMounts: the sidecar creates each session's directory before goose
// is asked to work in it, so it mounts the workspace at goose's path. The
// budget is a directory mount, not subPath: only those see ConfigMap updates.
func sidecarMounts(a *agentsv1alpha1.GooseAgent) []*corev1ac.VolumeMountApplyConfiguration {
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		mount(DataVolume, DataMountPath, false),
		mount(volTmp, "/tmp", false),
		mount(volGooseSecret, GooseSecretDir, true),
		mount(volAuthToken, AuthTokenDir, true),
		mount(volWorkspace, workspacePath(a), false),
		mount(volDrain, DrainDir, false),
	}
	if a.Spec.Budget != nil {
		mounts = append(mounts, mount(volBudget, BudgetDir, true))
	}
	if a.Spec.Workspace.Seed != nil {
		mounts = append(mounts, mount(volWorkspaceSeed, WorkspaceSeedDir, true))
	}
	if authSettings(a) != nil {
		mounts = append(mounts, mount(volAuthConfig, AuthConfigDir, true))
	}
	if authMode(a) == agentsv1alpha1.AuthModeKubernetes {
		mounts = append(mounts, mount(volAPIAccess, APIAccessDir, true))
	}
	return mounts
}

func httpProbe(path string, period, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString(PortName))).
		WithPeriodSeconds(period).WithFailureThreshold(failures)
}

// gooseContainer runs the flavor's goose server on loopback, where only the
// sidecar reaches it, in the workspace, with env from gooseEnv.
func gooseContainer(a *agentsv1alpha1.GooseAgent, image string, env []*corev1ac.EnvVarApplyConfiguration) (*corev1ac.ContainerApplyConfiguration, error) {
	c := corev1ac.Container().
		WithName(GooseContainer).
		WithImage(image).
		WithWorkingDir(workspacePath(a)).
		WithEnv(env...).
		// goose exports over OTLP itself when the standard environment says so.
		WithEnv(telemetryEnv(a)...).
		WithSecurityContext(restrictedContainer()).
		WithVolumeMounts(gooseMounts(a)...).
		WithLifecycle(corev1ac.Lifecycle().WithPreStop(corev1ac.LifecycleHandler().WithExec(
			corev1ac.ExecAction().WithCommand("/bin/sh", "-c", prestop.Script(DrainDir, stopTimingOf(a).hookWait)))))
	if flavor(a) == agentsv1alpha1.ServerFlavorGoosed {
		c.WithCommand("goosed").WithArgs("agent") // binds GOOSE_HOST:GOOSE_PORT (gooseEnv)
	} else {
		// The official image's entrypoint is the goose CLI.
		c.WithArgs("serve", "--host", "127.0.0.1", "--port", strconv.Itoa(GoosePortServe))
	}
	withPullPolicy(c, a.Spec.Server.ImagePullPolicy)
	if err := withResources(c, a.Spec.Resources); err != nil {
		return nil, err
	}
	return c, nil
}

func gooseMounts(a *agentsv1alpha1.GooseAgent) []*corev1ac.VolumeMountApplyConfiguration {
	mounts := []*corev1ac.VolumeMountApplyConfiguration{
		mount(DataVolume, DataMountPath, false),
		mount(volHome, HomeDir, false),
		mount(volTmp, "/tmp", false),
		mount(volWorkspace, workspacePath(a), false),
		mount(volGooseConfig, GooseConfigDir, true),
		mount(volDrain, DrainDir, false),
	}
	for _, rt := range a.Spec.Runtimes {
		m := mount(runtimeVolume(rt.Name), RuntimesDir+"/"+rt.Name, true)
		if rt.SubPath != "" {
			m.WithSubPath(rt.SubPath)
		}
		mounts = append(mounts, m)
	}
	if hasSecretHeaders(a) {
		mounts = append(mounts, mount(volSecretConfig, SecretConfigDir, true))
	}
	return mounts
}

func withPullPolicy(c *corev1ac.ContainerApplyConfiguration, p corev1.PullPolicy) *corev1ac.ContainerApplyConfiguration {
	if p != "" {
		c.WithImagePullPolicy(p)
	}
	return c
}

// withResources sets r unless it is empty.
func withResources(c *corev1ac.ContainerApplyConfiguration, r corev1.ResourceRequirements) error {
	if len(r.Limits) == 0 && len(r.Requests) == 0 && len(r.Claims) == 0 {
		return nil
	}
	ac, err := convert[corev1ac.ResourceRequirementsApplyConfiguration](r)
	if err != nil {
		return err
	}
	c.WithResources(ac)
	return nil
}

// podSecurityContext is spec.podTemplate.securityContext, else the
// "restricted" Pod Security Standard as the goose image's user.
func podSecurityContext(a *agentsv1alpha1.GooseAgent) (*corev1ac.PodSecurityContextApplyConfiguration, error) {
	if sc := a.Spec.PodTemplate.SecurityContext; sc != nil {
		return convert[corev1ac.PodSecurityContextApplyConfiguration](sc)
	}
	return corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(PodUID).
		WithRunAsGroup(PodUID).
		WithFSGroup(PodUID).
		WithFSGroupChangePolicy(corev1.FSGroupChangeOnRootMismatch).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)), nil
}

// applyPodOverrides sets spec.podTemplate's scheduling and identity fields.
func applyPodOverrides(pod *corev1ac.PodSpecApplyConfiguration, pt *agentsv1alpha1.PodTemplateOverrides) error {
	if pt.ServiceAccountName != "" {
		pod.WithServiceAccountName(pt.ServiceAccountName)
	}
	if len(pt.NodeSelector) > 0 {
		pod.WithNodeSelector(pt.NodeSelector)
	}
	if pt.PriorityClassName != "" {
		pod.WithPriorityClassName(pt.PriorityClassName)
	}
	for i := range pt.Tolerations {
		t, err := convert[corev1ac.TolerationApplyConfiguration](pt.Tolerations[i])
		if err != nil {
			return err
		}
		pod.WithTolerations(t)
	}
	if pt.Affinity != nil {
		aff, err := convert[corev1ac.AffinityApplyConfiguration](pt.Affinity)
		if err != nil {
			return err
		}
		pod.WithAffinity(aff)
	}
	for _, s := range pt.ImagePullSecrets {
		pod.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	return nil
}

// podLabels are spec.podTemplate.labels plus ours, which win: the selector
// depends on them.
func podLabels(a *agentsv1alpha1.GooseAgent) map[string]string {
	return withOurs(a.Spec.PodTemplate.Labels, Labels(a))
}

// podAnnotations are spec.podTemplate.annotations plus the config hash, which
// wins: it rolls the pods.
func podAnnotations(a *agentsv1alpha1.GooseAgent, hash string) map[string]string {
	return withOurs(a.Spec.PodTemplate.Annotations, map[string]string{ConfigHashAnnotation: hash})
}

// withOurs is a copy of the user's map with ours written over it.
func withOurs(user, ours map[string]string) map[string]string {
	out := make(map[string]string, len(user)+len(ours))
	maps.Copy(out, user)
	maps.Copy(out, ours)
	return out
}

// dataClaimTemplate is the per-replica session volume. The claim template
// list is atomic: the apiserver stores it exactly as applied plus defaults,
// so the template spells out volumeMode and omits the apiVersion/kind the
// server drops; the no-op check then matches.
func dataClaimTemplate(a *agentsv1alpha1.GooseAgent) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithVolumeMode(corev1.PersistentVolumeFilesystem).
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: storageSize(a)}))
	if sc := a.Spec.Storage.StorageClassName; sc != nil {
		spec.WithStorageClassName(*sc)
	}
	pvc := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	pvc.WithName(DataVolume).WithSpec(spec)
	return pvc
}
