package render_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// goose's config/migrations.rs migrate_platform_extensions adds every
// platform extension the merged config lacks, enabled when default_enabled,
// and keeps the enabled flag of an entry that parses as an ExtensionEntry
// (a platform entry needs name and description). spec.extensions is the
// agent's whole tool list, so every platform extension the spec leaves out is
// rendered as a parseable, disabled entry, and the ones it lists stay enabled.
func TestUpstreamConfigMigrationEnablesOnlyTheSpecsExtensions(t *testing.T) {
	for _, name := range []string{"minimal", "full"} {
		c := loadCase(t, name)
		d := build(t, c)
		var cfg struct {
			Extensions map[string]map[string]any `json:"extensions"`
		}
		if err := yaml.Unmarshal([]byte(d.ConfigMap.Data[render.KeyConfig]), &cfg); err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, e := range c.Agent.Spec.Extensions {
			listed[e.Name] = true
			if cfg.Extensions[e.Name]["enabled"] != true {
				t.Errorf("%s: listed extension %s = %v, want enabled", name, e.Name, cfg.Extensions[e.Name])
			}
		}
		for _, p := range render.PlatformExtensions {
			if listed[p] {
				continue
			}
			e := cfg.Extensions[p]
			_, hasDesc := e["description"].(string)
			if e["enabled"] != false || e["type"] != "platform" || e["name"] != p || !hasDesc {
				t.Errorf("%s: unlisted platform extension %s = %v, want a disabled platform entry with a description", name, p, e)
			}
		}
		if len(cfg.Extensions) != len(listed)+len(render.PlatformExtensions)-countListed(listed) {
			t.Errorf("%s: extensions %v: more than the spec's plus the disabled platform ones", name, cfg.Extensions)
		}
	}
}

func countListed(listed map[string]bool) int {
	n := 0
	for _, p := range render.PlatformExtensions {
		if listed[p] {
			n++
		}
	}
	return n
}

// server.rs validate_absolute_cwd: goose serve refuses a session whose cwd is
// not an existing directory in its own container. The sidecar's working
// directory must therefore be a path mounted into the goose container.
func TestUpstreamSessionCwdIsMountedInTheGooseContainer(t *testing.T) {
	for _, name := range []string{"minimal", "full", "goosed"} {
		d := build(t, loadCase(t, name))
		pod := d.StatefulSet.Spec.Template.Spec
		var cwd string
		for _, c := range pod.InitContainers {
			if *c.Name != render.SidecarContainer {
				continue
			}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--goose-working-dir="); ok {
					cwd = v
				}
			}
		}
		if cwd == "" {
			t.Fatalf("%s: the sidecar has no --goose-working-dir", name)
		}
		mounted := false
		for _, c := range pod.Containers {
			if *c.Name != render.GooseContainer {
				continue
			}
			for _, m := range c.VolumeMounts {
				mounted = mounted || *m.MountPath == cwd
			}
		}
		if !mounted {
			t.Errorf("%s: --goose-working-dir=%s is not a mount of the goose container", name, cwd)
		}
	}
}

// The official goose image (Dockerfile: debian bookworm-slim with goose, git,
// curl) has no node, npx, uv or uvx, so a stdio extension started by one of
// them needs a runtime; MissingRuntimes names the ones that lack it.
func TestMissingRuntimes(t *testing.T) {
	stdio := func(name, cmd string) agentsv1alpha1.ExtensionSpec {
		return agentsv1alpha1.ExtensionSpec{Name: name, Type: agentsv1alpha1.ExtensionStdio, Cmd: cmd}
	}
	node := agentsv1alpha1.RuntimeSpec{Name: "node", Image: "node:22", Commands: []string{"node", "npx"}}
	for name, tc := range map[string]struct {
		spec agentsv1alpha1.GooseAgentSpec
		want []string
	}{
		"no stdio":        {spec: agentsv1alpha1.GooseAgentSpec{Extensions: []agentsv1alpha1.ExtensionSpec{{Name: "developer", Type: agentsv1alpha1.ExtensionPlatform}}}},
		"own binary":      {spec: agentsv1alpha1.GooseAgentSpec{Extensions: []agentsv1alpha1.ExtensionSpec{stdio("fetch", "/usr/local/bin/mcp-fetch")}}},
		"npx, no runtime": {spec: agentsv1alpha1.GooseAgentSpec{Extensions: []agentsv1alpha1.ExtensionSpec{stdio("fs", "npx")}}, want: []string{"spec.extensions[fs].cmd npx"}},
		"npx from node":   {spec: agentsv1alpha1.GooseAgentSpec{Runtimes: []agentsv1alpha1.RuntimeSpec{node}, Extensions: []agentsv1alpha1.ExtensionSpec{stdio("fs", "npx")}}},
		"uvx, only node": {spec: agentsv1alpha1.GooseAgentSpec{Runtimes: []agentsv1alpha1.RuntimeSpec{node},
			Extensions: []agentsv1alpha1.ExtensionSpec{stdio("fs", "npx"), stdio("fetch", "/usr/bin/uvx")}}, want: []string{"spec.extensions[fetch].cmd /usr/bin/uvx"}},
		"the user's image may have it": {spec: agentsv1alpha1.GooseAgentSpec{Server: agentsv1alpha1.ServerSpec{Image: "registry.example.com/goose-node:1"},
			Extensions: []agentsv1alpha1.ExtensionSpec{stdio("fs", "npx")}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := render.MissingRuntimes(&agentsv1alpha1.GooseAgent{Spec: tc.spec})
			if (got == "") != (len(tc.want) == 0) {
				t.Fatalf("MissingRuntimes = %q, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) || !strings.Contains(got, "spec.runtimes") {
					t.Errorf("MissingRuntimes = %q, want it to name %q and spec.runtimes", got, w)
				}
			}
		})
	}
}

// Runtimes are image volumes mounted read-only into the goose container, and
// their bin directories lead goose's PATH, which keeps the image's own.
func TestRuntimesMountedOnPath(t *testing.T) {
	d := build(t, loadCase(t, "runtimes"))
	pod := d.StatefulSet.Spec.Template.Spec
	images := map[string]string{}
	for _, v := range pod.Volumes {
		if v.Image != nil {
			images[*v.Name] = *v.Image.Reference
		}
	}
	if images["runtime-node"] != "docker.io/library/node:22-bookworm-slim" || images["runtime-uv"] != "ghcr.io/astral-sh/uv:0.8.22" {
		t.Errorf("image volumes %v", images)
	}
	for _, c := range pod.Containers {
		if *c.Name != render.GooseContainer {
			continue
		}
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(*m.Name, "runtime-") && (m.ReadOnly == nil || !*m.ReadOnly) {
				t.Errorf("runtime mount %s is writable", *m.Name)
			}
		}
		path := ""
		for _, e := range c.Env {
			if *e.Name == "PATH" {
				path = *e.Value
			}
		}
		if path != "/opt/goose-runtimes/node/bin:/opt/goose-runtimes/uv:"+render.ImagePath {
			t.Errorf("PATH = %q", path)
		}
	}
	for _, c := range pod.InitContainers {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(*m.Name, "runtime-") {
				t.Errorf("container %s mounts runtime %s; only goose runs extensions", *c.Name, *m.Name)
			}
		}
	}
}
