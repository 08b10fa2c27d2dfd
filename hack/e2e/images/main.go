// Command images writes the e2e cluster's container images as OCI image
// archives, one per image, for `ctr -n k8s.io image import`. Each image is one
// layer of static binaries plus the few files the image's user needs.
//
// The manager and adk2goose images are read off the Dockerfile's targets of
// those names (BuildKit's parser): the binary each final stage copies from
// the build stage (taken from bin/, built by `make build` exactly as the
// Dockerfile's build stage does, see test/dockerfile), its destination, USER
// and ENTRYPOINT. Any other instruction in those stages is an error, so the
// e2e images cannot silently drift from the Dockerfile.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// Names of the e2e cluster's own images; hack/e2e/manifests and test/e2e
// use these references.
const (
	PauseRef     = "e2e.local/pause:1"
	CoreDNSRef   = "e2e.local/coredns:1"
	LocalPathRef = "e2e.local/local-path-provisioner:1"
	ShellRef     = "e2e.local/shell:1"
	ClientRef    = "e2e.local/client:1"
	RuntimeRef   = "e2e.local/mcp-runtime:1"
)

// entry is one file, directory or symlink in an image's layer.
type entry struct {
	path     string
	src      string // host file to copy
	data     string // or literal content
	link     string // or symlink target
	dir      bool
	mode     int64
	uid, gid int
}

// image is what one archive holds.
type image struct {
	name, ref  string
	entries    []entry
	user, wdir string
	entrypoint []string
	cmd, env   []string
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dockerfile := flag.String("dockerfile", "Dockerfile", "the Dockerfile whose manager and adk2goose targets to reproduce")
	bin := flag.String("bin", "bin", "directory holding `make build`'s manager and adk2goose")
	e2eBin := flag.String("e2e-bin", "bin/e2e", "directory holding goose, client, mcp-server and pause")
	addons := flag.String("addons", "bin/e2e/addons", "directory holding coredns and local-path-provisioner")
	busybox := flag.String("busybox", "/bin/busybox", "a static busybox (Debian's busybox-static) for the images that need a shell")
	out := flag.String("out", "bin/e2e/images", "directory for the OCI archives")
	managerRef := flag.String("manager-ref", "", "reference of the manager image (the one dist/install.yaml names)")
	sidecarRef := flag.String("adk2goose-ref", "", "reference of the adk2goose image (the manager's --adk2goose-image)")
	gooseRefs := flag.String("goose-refs", "", "comma-separated references for the goose stand-in (the manager's --goose-image, ...)")
	goosedRefs := flag.String("goosed-refs", "", "comma-separated references for the goosed stand-in (the goosed sample's image, ...)")
	flag.Parse()
	if *managerRef == "" || *sidecarRef == "" || *gooseRefs == "" || *goosedRefs == "" {
		return errors.New("-manager-ref, -adk2goose-ref, -goose-refs and -goosed-refs are required")
	}

	stages, err := parseDockerfile(*dockerfile)
	if err != nil {
		return err
	}
	var imgs []image
	for _, t := range []struct{ target, ref string }{{"manager", *managerRef}, {"adk2goose", *sidecarRef}} {
		img, err := fromStage(stages, t.target, t.ref, *bin)
		if err != nil {
			return err
		}
		imgs = append(imgs, img)
	}
	shell, err := busyboxEntries(ctx, *busybox)
	if err != nil {
		return err
	}
	e2e := func(name string) string { return filepath.Join(*e2eBin, name) }

	// The official goose image: USER goose (1000), HOME=/home/goose,
	// WORKDIR /home/goose, ENTRYPOINT /usr/local/bin/goose, CMD --help
	// (shared/reference/goose-acp.md §4), a Debian base with /bin/sh.
	gooseFiles := append(slices.Clone(shell),
		entry{path: "etc/passwd", data: "root:x:0:0:root:/root:/bin/sh\ngoose:x:1000:1000:goose:/home/goose:/bin/sh\n", mode: 0o644},
		entry{path: "etc/group", data: "root:x:0:\ngoose:x:1000:\n", mode: 0o644},
		entry{path: "home/goose", dir: true, mode: 0o755, uid: 1000, gid: 1000},
		entry{path: "tmp", dir: true, mode: 0o1777},
		entry{path: "usr/local/bin/goose", src: e2e("goose"), mode: 0o755},
		entry{path: "usr/local/bin/goosed", link: "goose"},
	)
	gooseEnv := []string{"HOME=/home/goose", "PATH=/usr/local/bin:/usr/bin:/bin"}
	for ref := range strings.SplitSeq(*gooseRefs, ",") {
		imgs = append(imgs, image{name: "goose", ref: ref, entries: gooseFiles, user: "goose", wdir: "/home/goose",
			entrypoint: []string{"/usr/local/bin/goose"}, cmd: []string{"--help"}, env: gooseEnv})
	}
	// hack/goosed.Dockerfile: the same user and home, ENTRYPOINT goosed, CMD agent.
	for ref := range strings.SplitSeq(*goosedRefs, ",") {
		imgs = append(imgs, image{name: "goosed", ref: ref, entries: gooseFiles, user: "1000:1000", wdir: "/home/goose",
			entrypoint: []string{"/usr/local/bin/goosed"}, cmd: []string{"agent"},
			env: append(slices.Clone(gooseEnv), "GOOSE_HOST=0.0.0.0", "GOOSE_PORT=3000", "GOOSE_TLS=false", "GOOSE_PATH_ROOT=/data/goose")})
	}
	root := []entry{{path: "etc/passwd", data: "root:x:0:0:root:/root:/bin/sh\n", mode: 0o644}, {path: "tmp", dir: true, mode: 0o1777}}
	imgs = append(imgs,
		image{name: "pause", ref: PauseRef, entries: []entry{{path: "pause", src: e2e("pause"), mode: 0o755}}, user: "65535:65535", entrypoint: []string{"/pause"}},
		image{name: "coredns", ref: CoreDNSRef, entries: append(slices.Clone(root), entry{path: "coredns", src: filepath.Join(*addons, "coredns"), mode: 0o755}), entrypoint: []string{"/coredns"}},
		image{name: "local-path-provisioner", ref: LocalPathRef, entries: append(slices.Clone(root), entry{path: "usr/bin/local-path-provisioner", src: filepath.Join(*addons, "local-path-provisioner"), mode: 0o755}),
			entrypoint: []string{"/usr/bin/local-path-provisioner"}},
		// The local-path helper pods run setup/teardown scripts with sh.
		image{name: "shell", ref: ShellRef, entries: append(slices.Clone(shell), root...), entrypoint: []string{"/bin/sh"}},
		image{name: "client", ref: ClientRef, entries: append(slices.Clone(shell), append(slices.Clone(root), entry{path: "usr/local/bin/client", src: e2e("client"), mode: 0o755})...),
			user: "65532:65532", entrypoint: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}},
		// A spec.runtimes image laid out like the node image (usr/local/bin),
		// its command the e2e stdio MCP server.
		image{name: "mcp-runtime", ref: RuntimeRef, entries: []entry{{path: "usr/local/bin/e2e-mcp-server", src: e2e("mcp-server"), mode: 0o755}},
			entrypoint: []string{"/usr/local/bin/e2e-mcp-server"}},
	)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, img := range imgs {
		start := time.Now()
		file := filepath.Join(*out, strings.NewReplacer("/", "_", ":", "_").Replace(img.ref)+".tar")
		if err := write(img, file); err != nil {
			return fmt.Errorf("failed to write image %s: %w", img.ref, err)
		}
		fmt.Printf("%-50s %s (%s)\n", img.ref, file, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func parseDockerfile(file string) ([]instructions.Stage, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	res, err := parser.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", file, err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", file, err)
	}
	return stages, nil
}

// distrolessNonroot is what a gcr.io/distroless/static:nonroot base gives the
// binaries: the nonroot user (65532), its home and /tmp.
var distrolessNonroot = []entry{
	{path: "etc/passwd", data: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n", mode: 0o644},
	{path: "etc/group", data: "root:x:0:\nnonroot:x:65532:\n", mode: 0o644},
	{path: "home/nonroot", dir: true, mode: 0o700, uid: 65532, gid: 65532},
	{path: "tmp", dir: true, mode: 0o1777},
}

// fromStage reproduces a final Dockerfile stage: a distroless nonroot base,
// one binary copied from the build stage's /out, USER and ENTRYPOINT.
func fromStage(stages []instructions.Stage, target, ref, bin string) (image, error) {
	i := slices.IndexFunc(stages, func(s instructions.Stage) bool { return s.Name == target })
	if i < 0 {
		return image{}, fmt.Errorf("the Dockerfile has no stage %q", target)
	}
	s := stages[i]
	if !strings.HasPrefix(s.BaseName, "gcr.io/distroless/static") || !strings.HasSuffix(s.BaseName, ":nonroot") {
		return image{}, fmt.Errorf("stage %s: base %q is not a distroless static nonroot image; teach hack/e2e/images about it", target, s.BaseName)
	}
	img := image{name: target, ref: ref, entries: slices.Clone(distrolessNonroot)}
	for _, c := range s.Commands {
		switch c := c.(type) {
		case *instructions.CopyCommand:
			if len(c.SourcePaths) != 1 || c.From == "" {
				return image{}, fmt.Errorf("stage %s: COPY %v: want one file from the build stage", target, c.SourcePaths)
			}
			src := c.SourcePaths[0]
			if path.Dir(src) != "/out" {
				return image{}, fmt.Errorf("stage %s: COPY %s: want a binary the build stage writes to /out", target, src)
			}
			img.entries = append(img.entries, entry{path: strings.TrimPrefix(c.DestPath, "/"), src: filepath.Join(bin, path.Base(src)), mode: 0o755})
		case *instructions.UserCommand:
			img.user = c.User
		case *instructions.EntrypointCommand:
			img.entrypoint = c.CmdLine
		default:
			return image{}, fmt.Errorf("stage %s: %s is not reproduced by hack/e2e/images", target, c.Name())
		}
	}
	if img.user == "" || len(img.entrypoint) == 0 {
		return image{}, fmt.Errorf("stage %s: no USER or ENTRYPOINT", target)
	}
	return img, nil
}

// busyboxEntries installs busybox as /bin/busybox with a symlink per applet,
// so /bin/sh, mkdir, cat, mv, rm, sleep... exist.
func busyboxEntries(ctx context.Context, bb string) ([]entry, error) {
	out, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("failed to list the applets of %s (install busybox-static): %w", bb, err)
	}
	es := []entry{{path: "bin/busybox", src: bb, mode: 0o755}}
	for a := range strings.FieldsSeq(string(out)) {
		if a != "busybox" {
			es = append(es, entry{path: "bin/" + a, link: "busybox"})
		}
	}
	return es, nil
}

// layerTar renders entries as an uncompressed tar, parents first.
func layerTar(es []entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0)
	var mkdirs func(p string) error
	mkdirs = func(p string) error {
		if p == "." || p == "" || dirs[p] {
			return nil
		}
		if err := mkdirs(path.Dir(p)); err != nil {
			return err
		}
		dirs[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: epoch})
	}
	for _, e := range es {
		if err := mkdirs(path.Dir(e.path)); err != nil {
			return nil, err
		}
		h := &tar.Header{Name: e.path, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch}
		var body []byte
		switch {
		case e.dir:
			if dirs[e.path] {
				continue
			}
			dirs[e.path] = true
			h.Typeflag, h.Name = tar.TypeDir, e.path+"/"
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		case e.src != "":
			b, err := os.ReadFile(e.src)
			if err != nil {
				return nil, err
			}
			body = b
		default:
			body = []byte(e.data)
		}
		if !e.dir && e.link == "" {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write renders img as an OCI image layout in a tar file, named for
// containerd's importer by the io.containerd.image.name annotation.
func write(img image, file string) error {
	data, err := layerTar(img.entries)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	v, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return err
	}
	cf, err := v.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.User, cf.Config.WorkingDir = img.user, img.wdir
	cf.Config.Entrypoint, cf.Config.Cmd = img.entrypoint, img.cmd
	cf.Config.Env = img.env
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	v, err = mutate.ConfigFile(v, cf)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(v, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		layout.WithAnnotations(map[string]string{"io.containerd.image.name": img.ref, "org.opencontainers.image.ref.name": img.ref})); err != nil {
		return err
	}
	return tarDir(dir, file)
}

// tarDir writes the files under dir into a tar at file (via a temporary name).
func tarDir(dir, file string) error {
	f, err := os.CreateTemp(filepath.Dir(file), ".archive-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }() // gone already after the rename
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		_ = f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
