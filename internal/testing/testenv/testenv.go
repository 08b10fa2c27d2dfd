// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the GooseAgent CRD installed, for tests across the module.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for kubectl.
	Kubeconfig string
	// Assets is the directory holding kube-apiserver, etcd and kubectl.
	Assets string

	env *envtest.Environment
	// certDir is the apiserver's certificate directory when Restartable
	// chose it; removed by Stop.
	certDir string
}

// RepoRoot returns the repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, ok := goruntime.Caller(0)
	if !ok {
		// Caller(0) describes this function, so this does not happen; if it
		// did, paths would resolve from the working directory.
		return "."
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Scheme returns a scheme with the built-in types and the GooseAgent API.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // static registration cannot fail at run time
	}
	if err := agentsv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// ErrNoAssets means KUBEBUILDER_ASSETS is unset, so no control plane can start.
var ErrNoAssets = errors.New("KUBEBUILDER_ASSETS is not set: `make test` builds the envtest binaries and sets it")

// Option changes how New starts the control plane.
type Option func(*envtest.Environment)

// WideServiceRange gives Services a /16 instead of envtest's /24, which runs
// out of ClusterIPs at about 250 agents. 198.19.0.0/16 is reserved for
// benchmarking and never routed, and no packet is ever sent to it here.
func WideServiceRange() Option {
	return func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "198.19.0.0/16")
	}
}

// Restartable keeps the apiserver's serving certificates, CA and port
// across StopAPIServer and StartAPIServer, so clients made before a restart
// reconnect to it afterwards, as they do to a real apiserver. etcd keeps
// running, and with it every object.
func Restartable() Option {
	return func(e *envtest.Environment) {
		e.ControlPlane.GetAPIServer().CertDir = restartableCertDir
		// A graceful stop drains the requests in flight, which on a loaded
		// machine takes longer than envtest's default 20 s.
		e.ControlPlaneStopTimeout = 2 * time.Minute
	}
}

// restartableCertDir marks, in the apiserver's CertDir, that New must make
// a directory of its own for it: envtest removes a directory it made itself
// when the apiserver stops, and its certificates with it.
const restartableCertDir = "\x00restartable"

// New starts a control plane with the CRDs of config/crd/bases installed.
// Call Stop when done. It returns ErrNoAssets without KUBEBUILDER_ASSETS.
func New(opts ...Option) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, ErrNoAssets
	}
	scheme := Scheme()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
	}
	for _, o := range opts {
		o(env)
	}
	var certDir string
	if api := env.ControlPlane.GetAPIServer(); api.CertDir == restartableCertDir {
		dir, err := os.MkdirTemp("", "testenv-apiserver-")
		if err != nil {
			return nil, fmt.Errorf("failed to create the apiserver's certificate dir: %w", err)
		}
		api.CertDir, certDir = dir, dir
	}
	cfg, err := env.Start()
	if err != nil {
		if certDir != "" {
			_ = os.RemoveAll(certDir)
		}
		return nil, fmt.Errorf("failed to start envtest: %w", err)
	}
	e := &Env{Config: cfg, Scheme: scheme, Assets: assets, env: env, certDir: certDir}
	if err := e.init(); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Env) init() error {
	c, err := client.New(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		return fmt.Errorf("failed to create client: %w", err)
	}
	e.Client = c
	user, err := e.env.AddUser(envtest.User{Name: "envtest-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("failed to add envtest user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("failed to render kubeconfig: %w", err)
	}
	dir, err := os.MkdirTemp("", "testenv-")
	if err != nil {
		return fmt.Errorf("failed to create kubeconfig dir: %w", err)
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	return nil
}

// AddUser returns a client configuration for a new user of the control
// plane, authenticated by a client certificate, with no rights of its own:
// a test binds it to the role it means to check.
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		return nil, fmt.Errorf("failed to add user %s: %w", name, err)
	}
	return u.Config(), nil
}

// Stop stops the control plane and removes the kubeconfig.
func (e *Env) Stop() error {
	if e.Kubeconfig != "" {
		_ = os.RemoveAll(filepath.Dir(e.Kubeconfig))
	}
	err := e.env.Stop()
	if e.certDir != "" {
		_ = os.RemoveAll(e.certDir)
	}
	return err
}

// ErrNotRestartable: the control plane was started without Restartable.
var ErrNotRestartable = errors.New("the control plane was not started with testenv.Restartable")

// StopAPIServer stops kube-apiserver (SIGTERM, then waits for it to exit);
// etcd keeps running. Only for a control plane started with Restartable.
func (e *Env) StopAPIServer() error {
	if e.certDir == "" {
		return ErrNotRestartable
	}
	if err := e.env.ControlPlane.GetAPIServer().Stop(); err != nil {
		return fmt.Errorf("failed to stop kube-apiserver: %w", err)
	}
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same
// port with the same certificates, and waits until it is healthy.
func (e *Env) StartAPIServer() error {
	if e.certDir == "" {
		return ErrNotRestartable
	}
	if err := e.env.ControlPlane.GetAPIServer().Start(); err != nil {
		return fmt.Errorf("failed to start kube-apiserver: %w", err)
	}
	return nil
}

// Start starts a control plane for one test and stops it when the test ends.
// Without KUBEBUILDER_ASSETS the test is skipped, except under CI (CI set),
// where a missing control plane is a failure.
func Start(t testing.TB) *Env {
	t.Helper()
	e, err := New()
	SkipOrFail(t, err)
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("failed to stop envtest: %v", err)
		}
	})
	return e
}

// The control plane of RunShared, for the tests of one package.
var (
	shared    *Env
	sharedErr error
)

// RunShared starts one control plane for a whole test binary, runs its tests
// and stops it: call it from TestMain as os.Exit(testenv.RunShared(m)).
// Tests get it with Shared. Starting a control plane costs seconds.
func RunShared(m *testing.M) int {
	shared, sharedErr = New()
	if sharedErr != nil && !errors.Is(sharedErr, ErrNoAssets) {
		fmt.Fprintln(os.Stderr, sharedErr)
		return 1
	}
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	return code
}

// Shared returns the control plane of RunShared, or skips (fails under CI)
// when there is none.
func Shared(t testing.TB) *Env {
	t.Helper()
	SkipOrFail(t, sharedErr)
	return shared
}

// RequireAssets skips a test that needs the envtest binaries when
// KUBEBUILDER_ASSETS is unset, or fails it under CI.
func RequireAssets(t testing.TB) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		SkipOrFail(t, ErrNoAssets)
	}
}

// SkipOrFail handles an error of New in a test: skip for ErrNoAssets outside
// CI, fail otherwise.
func SkipOrFail(t testing.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrNoAssets) && os.Getenv("CI") == "":
		t.Skip(err.Error())
	default:
		t.Fatal(err)
	}
}

// Kubectl returns the path of the kubectl binary built beside the envtest binaries.
func (e *Env) Kubectl() string { return filepath.Join(e.Assets, "kubectl") }

// Syncer is a cache-backed runnable: a controller-runtime cache, or anything
// that starts one (package references' Tracker).
type Syncer interface {
	Start(ctx context.Context) error
	WaitForCacheSync(ctx context.Context) bool
}

// RunSynced starts s until the test ends, failing the test if it stops with
// an error, and returns once its caches have synced.
func RunSynced(t testing.TB, s Syncer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("failed to run %T: %v", s, err)
		}
	})
	if !s.WaitForCacheSync(ctx) {
		t.Fatalf("%T did not sync", s)
	}
}
