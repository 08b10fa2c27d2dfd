package render_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

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
