package render

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/internal/prestop"
)

// bareAgent has only what the API requires; every optional field is unset.
func bareAgent() *agentsv1alpha1.GooseAgent {
	return &agentsv1alpha1.GooseAgent{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "agents"},
		Spec:       agentsv1alpha1.GooseAgentSpec{Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "qwen3:8b"}},
	}
}

// fullAgent sets every field that adds a volume, a mount or a flag.
func fullAgent() *agentsv1alpha1.GooseAgent {
	a := bareAgent()
	a.Name = "full"
	s := &a.Spec
	s.Description = "tickets"
	s.InstructionsFrom = &agentsv1alpha1.ValueSource{SecretKeyRef: &agentsv1alpha1.SecretKeyRef{Name: "prompt", Key: "text"}}
	s.Extensions = []agentsv1alpha1.ExtensionSpec{{Name: "tickets", Type: agentsv1alpha1.ExtensionStreamableHTTP, URI: "http://t",
		HeadersFrom: []agentsv1alpha1.SecretHeader{{Name: "Authorization", SecretKeyRef: agentsv1alpha1.SecretKeyRef{Name: "t", Key: "k"}}}}}
	s.Runtimes = []agentsv1alpha1.RuntimeSpec{{Name: "node", Image: "node:22", SubPath: "usr/local", ImagePullPolicy: corev1.PullIfNotPresent}}
	s.Budget = &agentsv1alpha1.BudgetSpec{Period: agentsv1alpha1.BudgetPeriodDay, TotalTokens: 10}
	s.Workspace = agentsv1alpha1.WorkspaceSpec{MountPath: "/work", Seed: &agentsv1alpha1.WorkspaceSeed{ConfigMapName: "seed"}}
	s.Sidecar = agentsv1alpha1.SidecarSpec{Port: 9090, CORSAllowedOrigins: []string{"https://a.example", "https://b.example"},
		Auth: agentsv1alpha1.SidecarAuth{TokenSecretRef: &agentsv1alpha1.SecretKeyRef{Name: "token", Key: "bearer"}}}
	return a
}

func TestImagePrefersTheSpecThenTheDefault(t *testing.T) {
	if got, err := image("mine:1", "default:1", "spec.server.image", "goose"); err != nil || got != "mine:1" {
		t.Errorf("spec and default set: %q, %v; want the spec's", got, err)
	}
	if got, err := image("", "default:1", "spec.server.image", "goose"); err != nil || got != "default:1" {
		t.Errorf("only the default set: %q, %v; want the default", got, err)
	}
	_, err := image("", "", "spec.sidecar.image", "adk2goose")
	if !IsInvalidSpec(err) || !strings.Contains(err.Error(), "spec.sidecar.image") {
		t.Errorf("neither set: %v; want an InvalidSpecError naming the field", err)
	}
	if _, err := buildStatefulSet(bareAgent(), Defaults{GooseImage: "g"}, nil, "h", false); !IsInvalidSpec(err) {
		t.Errorf("buildStatefulSet without a sidecar image: %v; want an InvalidSpecError", err)
	}
}

func TestWorkspaceVolumeSource(t *testing.T) {
	a := bareAgent()
	v, err := workspaceVolume(a)
	if err != nil || v.EmptyDir == nil || v.EmptyDir.SizeLimit != nil || v.PersistentVolumeClaim != nil {
		t.Fatalf("default: %+v, %v; want a plain emptyDir", v, err)
	}
	limit := resource.MustParse("2Gi")
	a.Spec.Workspace.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: &limit}
	if v, err = workspaceVolume(a); err != nil || v.EmptyDir == nil || v.EmptyDir.SizeLimit.Cmp(limit) != 0 {
		t.Fatalf("emptyDir: %+v, %v; want the spec's size limit", v, err)
	}
	a.Spec.Workspace.EmptyDir = nil
	a.Spec.Workspace.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "shared", ReadOnly: true}
	v, err = workspaceVolume(a)
	if err != nil || v.EmptyDir != nil || v.PersistentVolumeClaim == nil || *v.PersistentVolumeClaim.ClaimName != "shared" || !*v.PersistentVolumeClaim.ReadOnly {
		t.Fatalf("claim: %+v, %v; want the spec's claim", v, err)
	}
	if *v.Name != volWorkspace {
		t.Errorf("name %q", *v.Name)
	}
}

// The volumes and each container's mounts come from separate builders; every
// mount must name a volume and every volume must be mounted.
func TestPodVolumesMatchTheMounts(t *testing.T) {
	for _, a := range []*agentsv1alpha1.GooseAgent{bareAgent(), fullAgent()} {
		t.Run(a.Name, func(t *testing.T) {
			volumes, err := podVolumes(a)
			if err != nil {
				t.Fatal(err)
			}
			declared := map[string]bool{DataVolume: true} // the claim template's
			for _, v := range volumes {
				if declared[*v.Name] {
					t.Errorf("volume %s declared twice", *v.Name)
				}
				declared[*v.Name] = true
			}
			sidecar, err := sidecarContainer(a, "s")
			if err != nil {
				t.Fatal(err)
			}
			goose, err := gooseContainer(a, "g", nil)
			if err != nil {
				t.Fatal(err)
			}
			mounted := map[string]bool{}
			for _, c := range []*corev1ac.ContainerApplyConfiguration{initContainer(a, "g"), sidecar, goose} {
				for _, m := range c.VolumeMounts {
					if !declared[*m.Name] {
						t.Errorf("%s mounts %s, which is no volume", *c.Name, *m.Name)
					}
					mounted[*m.Name] = true
				}
			}
			for name := range declared {
				if !mounted[name] {
					t.Errorf("volume %s is mounted by no container", name)
				}
			}
		})
	}
}

func TestPodVolumesFollowTheSpec(t *testing.T) {
	names := func(a *agentsv1alpha1.GooseAgent) []string {
		volumes, err := podVolumes(a)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range volumes {
			out = append(out, *v.Name)
		}
		return out
	}
	always := []string{volHome, volTmp, volWorkspace, volGooseConfig, volGooseSecret, volAuthToken, volDrain}
	if diff := cmp.Diff(always, names(bareAgent())); diff != "" {
		t.Errorf("bare agent (-want +got):\n%s", diff)
	}
	want := append(slices.Clone(always), runtimeVolume("node"), volSecretConfig, volInstructions, volBudget, volWorkspaceSeed)
	if diff := cmp.Diff(want, names(fullAgent())); diff != "" {
		t.Errorf("full agent (-want +got):\n%s", diff)
	}

	// The token comes from the user's Secret when one is named.
	volumes, _ := podVolumes(fullAgent())
	token := volumes[5].Secret
	if *token.SecretName != "token" || *token.Items[0].Key != "bearer" || *token.Items[0].Path != authTokenFile {
		t.Errorf("auth token volume %+v, want the user's Secret key as %s", token, authTokenFile)
	}
	rt := volumes[7].Image
	if *rt.Reference != "node:22" || *rt.PullPolicy != corev1.PullIfNotPresent {
		t.Errorf("runtime volume %+v", rt)
	}
}

func TestInitContainerMountsInstructionsOnlyWhenSet(t *testing.T) {
	a := bareAgent()
	a.Spec.Server.ImagePullPolicy = corev1.PullAlways
	c := initContainer(a, "goose:1")
	if len(c.VolumeMounts) != 1 || *c.VolumeMounts[0].Name != DataVolume {
		t.Errorf("no instructions: mounts %+v, want the data volume only", c.VolumeMounts)
	}
	if *c.Image != "goose:1" || *c.ImagePullPolicy != corev1.PullAlways || c.Command[2] != hintsScript {
		t.Errorf("container %+v", c)
	}
	a.Spec.Instructions = "be brief"
	c = initContainer(a, "goose:1")
	if len(c.VolumeMounts) != 2 || *c.VolumeMounts[1].Name != volInstructions || *c.VolumeMounts[1].MountPath != InstructionsDir || !*c.VolumeMounts[1].ReadOnly {
		t.Errorf("inline instructions: mounts %+v, want the instructions read-only at %s", c.VolumeMounts, InstructionsDir)
	}
	// The script reads what the mount provides and writes goose's hints file.
	if !strings.Contains(hintsScript, InstructionsDir+"/"+KeyInstructions) || !strings.Contains(hintsScript, GoosePathRoot+"/config/.goosehints") {
		t.Errorf("script %q", hintsScript)
	}
}

func TestSidecarArgs(t *testing.T) {
	args := sidecarArgs(bareAgent())
	for _, want := range []string{
		"--listen=:8080", "--goose-url=http://127.0.0.1:3284", "--goose-flavor=serve",
		"--goose-secret-file=" + GooseSecretDir + "/" + gooseSecretFile, "--goose-working-dir=/workspace",
		"--auth-token-file=" + AuthTokenDir + "/" + authTokenFile, "--data-dir=" + SidecarDataDir,
		"--public-base-url=http://bare.agents.svc.cluster.local:8080", "--app-name=bare",
		"--peers-host=bare-headless.agents.svc", "--workspace-scope=session", "--workspace-retention=720h0m0s",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("bare agent: no %s in %v", want, args)
		}
	}
	for _, flag := range []string{"--description=", "--cors-origins=", "--budget-file=", "--workspace-seed-dir="} {
		if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag) }) {
			t.Errorf("bare agent: %s set in %v", flag, args)
		}
	}
	args = sidecarArgs(fullAgent())
	for _, want := range []string{
		"--listen=:9090", "--goose-working-dir=/work", "--description=tickets",
		"--cors-origins=https://a.example,https://b.example", "--budget-file=" + BudgetDir + "/" + KeyBudget,
		"--workspace-seed-dir=" + WorkspaceSeedDir,
	} {
		if !slices.Contains(args, want) {
			t.Errorf("full agent: no %s in %v", want, args)
		}
	}
}

func TestSidecarContainer(t *testing.T) {
	a := fullAgent()
	a.Spec.Sidecar.ImagePullPolicy = corev1.PullNever
	a.Spec.Sidecar.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	c, err := sidecarContainer(a, "adk2goose:1")
	if err != nil {
		t.Fatal(err)
	}
	if *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("restartPolicy %v, want a native sidecar", *c.RestartPolicy)
	}
	if len(c.Ports) != 1 || *c.Ports[0].ContainerPort != 9090 || *c.Ports[0].Name != PortName {
		t.Errorf("ports %+v, want spec.sidecar.port named %s", c.Ports, PortName)
	}
	for name, p := range map[string]*corev1ac.ProbeApplyConfiguration{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet.Port.StrVal != PortName {
			t.Errorf("%s probe %+v, want an HTTP probe on %s", name, p, PortName)
		}
	}
	if *c.ReadinessProbe.HTTPGet.Path != "/readyz" || *c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("readiness %s, liveness %s", *c.ReadinessProbe.HTTPGet.Path, *c.LivenessProbe.HTTPGet.Path)
	}
	if *c.ImagePullPolicy != corev1.PullNever || c.Resources == nil || !(*c.Resources.Limits)[corev1.ResourceMemory].Equal(resource.MustParse("256Mi")) {
		t.Errorf("pull policy %v, resources %+v; want spec.sidecar's", *c.ImagePullPolicy, c.Resources)
	}
	if *c.Env[0].Name != "POD_IP" || *c.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("env %+v, want POD_IP first", c.Env)
	}
	if c, _ := sidecarContainer(bareAgent(), "adk2goose:1"); c.Resources != nil || c.ImagePullPolicy != nil {
		t.Errorf("bare agent: resources %+v, pull policy %v; want both unset", c.Resources, c.ImagePullPolicy)
	}
}

func TestGooseContainerRunsTheFlavorsServer(t *testing.T) {
	env := []*corev1ac.EnvVarApplyConfiguration{envValue("A", "1")}
	a := bareAgent()
	c, err := gooseContainer(a, "goose:1", env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Command != nil || !slices.Equal(c.Args, []string{"serve", "--host", "127.0.0.1", "--port", "3284"}) {
		t.Errorf("serve: command %v args %v; want the image's entrypoint with serve on loopback", c.Command, c.Args)
	}
	if *c.WorkingDir != "/workspace" || *c.Env[0].Name != "A" || len(c.Ports) != 0 {
		t.Errorf("working dir %s, env %+v, ports %+v", *c.WorkingDir, c.Env, c.Ports)
	}

	a.Spec.Server = agentsv1alpha1.ServerSpec{Flavor: agentsv1alpha1.ServerFlavorGoosed, Image: "goosed:1.41", ImagePullPolicy: corev1.PullAlways}
	a.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	if c, err = gooseContainer(a, "goosed:1.41", env); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Command, []string{"goosed"}) || !slices.Equal(c.Args, []string{"agent"}) {
		t.Errorf("goosed: command %v args %v", c.Command, c.Args)
	}
	if *c.ImagePullPolicy != corev1.PullAlways || c.Resources == nil || !(*c.Resources.Requests)[corev1.ResourceCPU].Equal(resource.MustParse("500m")) {
		t.Errorf("pull policy %v, resources %+v; want spec.server's and spec.resources", c.ImagePullPolicy, c.Resources)
	}
}

func TestGooseMounts(t *testing.T) {
	byName := map[string]corev1ac.VolumeMountApplyConfiguration{}
	for _, m := range gooseMounts(fullAgent()) {
		byName[*m.Name] = *m
	}
	if m := byName[volWorkspace]; *m.MountPath != "/work" || m.ReadOnly != nil {
		t.Errorf("workspace mount %+v, want writable at spec.workspace.mountPath", m)
	}
	if m := byName[runtimeVolume("node")]; *m.MountPath != RuntimesDir+"/node" || *m.SubPath != "usr/local" || !*m.ReadOnly {
		t.Errorf("runtime mount %+v", m)
	}
	if m := byName[volSecretConfig]; *m.MountPath != SecretConfigDir || !*m.ReadOnly {
		t.Errorf("secret config mount %+v", m)
	}
	if _, ok := byName[volAuthToken]; ok {
		t.Error("goose mounts the sidecar's auth token")
	}
}

func TestPodSecurityContext(t *testing.T) {
	a := bareAgent()
	sc, err := podSecurityContext(a)
	if err != nil {
		t.Fatal(err)
	}
	if !*sc.RunAsNonRoot || *sc.RunAsUser != PodUID || *sc.FSGroup != PodUID || *sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("default %+v, want restricted as uid %d", sc, PodUID)
	}
	a.Spec.PodTemplate.SecurityContext = &corev1.PodSecurityContext{RunAsUser: new(int64(2000))}
	if sc, err = podSecurityContext(a); err != nil {
		t.Fatal(err)
	}
	if *sc.RunAsUser != 2000 || sc.FSGroup != nil || sc.RunAsNonRoot != nil {
		t.Errorf("override %+v, want the user's context in place of ours", sc)
	}
}

func TestApplyPodOverrides(t *testing.T) {
	pod := corev1ac.PodSpec()
	if err := applyPodOverrides(pod, &agentsv1alpha1.PodTemplateOverrides{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(corev1ac.PodSpec(), pod); diff != "" {
		t.Errorf("empty overrides changed the pod (-want +got):\n%s", diff)
	}
	pt := &agentsv1alpha1.PodTemplateOverrides{
		ServiceAccountName: "agent", PriorityClassName: "high", NodeSelector: map[string]string{"os": "linux"},
		Tolerations:      []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "agents", Effect: corev1.TaintEffectNoSchedule}},
		Affinity:         &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
	}
	if err := applyPodOverrides(pod, pt); err != nil {
		t.Fatal(err)
	}
	if *pod.ServiceAccountName != "agent" || *pod.PriorityClassName != "high" || pod.NodeSelector["os"] != "linux" ||
		len(pod.Tolerations) != 1 || *pod.Tolerations[0].Value != "agents" || pod.Affinity == nil || pod.Affinity.NodeAffinity == nil ||
		len(pod.ImagePullSecrets) != 1 || *pod.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("pod %+v, want every override", pod)
	}
}

func TestPodLabelsAndAnnotationsKeepOurs(t *testing.T) {
	a := bareAgent()
	a.Spec.PodTemplate.Labels = map[string]string{"team": "platform", LabelInstance: "other"}
	a.Spec.PodTemplate.Annotations = map[string]string{"owner": "platform", ConfigHashAnnotation: "stale"}
	l := podLabels(a)
	if l["team"] != "platform" || l[LabelInstance] != "bare" || l[LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v, want the user's plus ours, ours winning", l)
	}
	ann := podAnnotations(a, "h1")
	if ann["owner"] != "platform" || ann[ConfigHashAnnotation] != "h1" {
		t.Errorf("annotations %v, want the user's plus the config hash, ours winning", ann)
	}
	if a.Spec.PodTemplate.Labels[LabelInstance] != "other" || a.Spec.PodTemplate.Annotations[ConfigHashAnnotation] != "stale" {
		t.Error("the spec's maps were written to")
	}
}

func TestDataClaimTemplate(t *testing.T) {
	a := bareAgent()
	pvc := dataClaimTemplate(a)
	s := pvc.Spec
	if *pvc.Name != DataVolume || *s.VolumeMode != corev1.PersistentVolumeFilesystem || !slices.Equal(s.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim %+v, want one RWO filesystem volume named %s", pvc, DataVolume)
	}
	if got := (*s.Resources.Requests)[corev1.ResourceStorage]; !got.Equal(defaultStorageSize) || s.StorageClassName != nil {
		t.Errorf("size %s, class %v; want the 1Gi default and the cluster's class", got.String(), s.StorageClassName)
	}
	// The apiserver drops apiVersion and kind from claim templates.
	if pvc.APIVersion != nil || pvc.Kind != nil {
		t.Errorf("claim template has apiVersion %v kind %v", pvc.APIVersion, pvc.Kind)
	}
	size := resource.MustParse("5Gi")
	a.Spec.Storage = agentsv1alpha1.StorageSpec{Size: &size, StorageClassName: new("fast")}
	s = dataClaimTemplate(a).Spec
	if got := (*s.Resources.Requests)[corev1.ResourceStorage]; !got.Equal(size) || *s.StorageClassName != "fast" {
		t.Errorf("size %s, class %v; want spec.storage's", got.String(), s.StorageClassName)
	}
}

// TestGooseWaitsForTheSidecarToDrain: goose's preStop hook and the sidecar
// meet in one shared directory, and the pod's grace period (the default,
// the API's minimum, or a long one) outlasts the hook's wait, which
// outlasts the sidecar's drain.
func TestGooseWaitsForTheSidecarToDrain(t *testing.T) {
	withGrace := func(s int64) *agentsv1alpha1.GooseAgent {
		a := bareAgent()
		a.Spec.PodTemplate.TerminationGracePeriodSeconds = &s
		return a
	}
	for _, tc := range []struct {
		a         *agentsv1alpha1.GooseAgent
		grace     int64
		drain     time.Duration
		hookAtMax time.Duration
	}{
		{bareAgent(), DefaultTerminationGracePeriod, 40 * time.Second, 50 * time.Second},
		{fullAgent(), DefaultTerminationGracePeriod, 40 * time.Second, 50 * time.Second},
		{withGrace(30), 30, 10 * time.Second, 20 * time.Second},
		{withGrace(600), 600, 580 * time.Second, 590 * time.Second},
	} {
		pod, err := buildPodSpec(tc.a, Defaults{GooseImage: "g", SidecarImage: "s"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		goose, sidecar := pod.Containers[0], pod.InitContainers[1]
		hook := goose.Lifecycle.PreStop.Exec.Command
		if len(hook) != 3 || hook[0] != "/bin/sh" || hook[2] != prestop.Script(DrainDir, tc.hookAtMax) {
			t.Errorf("grace %d: goose's preStop hook is %q, want prestop.Script on %s waiting %s", tc.grace, hook, DrainDir, tc.hookAtMax)
		}
		mounted := func(c corev1ac.ContainerApplyConfiguration) bool {
			for _, m := range c.VolumeMounts {
				if *m.Name == volDrain && *m.MountPath == DrainDir && m.ReadOnly == nil {
					return true
				}
			}
			return false
		}
		if !mounted(goose) || !mounted(sidecar) {
			t.Errorf("the drain volume is not mounted writable at %s in both goose and the sidecar", DrainDir)
		}
		var dir string
		for _, e := range sidecar.Env {
			if *e.Name == "ADK2GOOSE_DRAIN_DIR" {
				dir = *e.Value
			}
		}
		if dir != DrainDir || !slices.Contains(sidecar.Args, "--drain-timeout="+tc.drain.String()) {
			t.Errorf("grace %d: the sidecar watches %q with args %q, want %s and --drain-timeout=%s", tc.grace, dir, sidecar.Args, DrainDir, tc.drain)
		}
		grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		if *pod.TerminationGracePeriodSeconds != tc.grace || tc.drain >= tc.hookAtMax || tc.hookAtMax >= grace {
			t.Errorf("grace %s (want %ds), drain %s, hook wait %s: each must outlast the one before", grace, tc.grace, tc.drain, tc.hookAtMax)
		}
	}
}
