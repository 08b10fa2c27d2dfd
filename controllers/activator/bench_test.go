package activator

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

// heapBytes is the live heap after a full collection.
func heapBytes() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkParkedAgentMemory reports what the activator keeps per parked
// agent with no request held: B/agent-idle with the agents merely existing
// (the activator keeps nothing for them; the cache holds the agents for the
// reconciler anyway), and B/agent-called once each agent has been called
// once (a 401 builds and keeps its door: token, verifier, card). Run it
// with -benchtime=1x: every run measures the same agents.
func BenchmarkParkedAgentMemory(b *testing.B) {
	const n = 200
	for _, mode := range []agentsv1alpha1.AuthMode{agentsv1alpha1.AuthModeToken, agentsv1alpha1.AuthModeKubernetes} {
		b.Run(string(mode), func(b *testing.B) {
			mgr, refs := sharedManager(b)
			env := testenv.Shared(b)
			ctx := context.Background()
			ns := fmt.Sprintf("activator-mem-%d", namespaces.Add(1))
			if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				ga := &agentsv1alpha1.GooseAgent{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("agent%d", i)},
					Spec: agentsv1alpha1.GooseAgentSpec{
						Provider: agentsv1alpha1.ProviderSpec{Name: "ollama", Model: "m"},
						Idle:     &agentsv1alpha1.IdleSpec{After: &metav1.Duration{Duration: time.Minute}},
						Sidecar:  agentsv1alpha1.SidecarSpec{Auth: agentsv1alpha1.SidecarAuth{Mode: mode}},
					},
				}
				if err := env.Client.Create(ctx, ga); err != nil {
					b.Fatal(err)
				}
				if err := env.Client.Create(ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.SecretName(ga), Labels: render.Labels(ga)},
					Data:       map[string][]byte{render.KeyAuthToken: []byte(testToken)},
				}); err != nil {
					b.Fatal(err)
				}
			}
			poll.UntilNil(b, "the agents in the cache", func() error {
				var list agentsv1alpha1.GooseAgentList
				if err := mgr.GetClient().List(ctx, &list, client.InNamespace(ns)); err != nil {
					return err
				}
				if len(list.Items) != n {
					return fmt.Errorf("%d of %d", len(list.Items), n)
				}
				return nil
			})
			before := heapBytes()
			act, err := New(Config{Addr: "127.0.0.1:0", Client: mgr.GetClient(), Cache: mgr.GetCache(), Tokens: refs, REST: env.Config})
			if err != nil {
				b.Fatal(err)
			}
			actx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- act.Start(actx) }()
			defer func() {
				cancel()
				<-done
			}()
			<-act.Listening()
			idle := heapBytes()
			for b.Loop() {
				for i := range n {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+act.Addr().String()+"/list-apps", nil)
					req.Host = fmt.Sprintf("agent%d.%s", i, ns)
					resp, err := testClient.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusUnauthorized {
						b.Fatalf("agent%d: %d", i, resp.StatusCode)
					}
				}
			}
			called := heapBytes()
			if act.doors.cache.Len() != n {
				b.Fatalf("%d doors kept; want %d", act.doors.cache.Len(), n)
			}
			b.ReportMetric(float64(int64(idle)-int64(before))/n, "B/agent-idle")
			b.ReportMetric(float64(int64(called)-int64(before))/n, "B/agent-called")
		})
	}
}

// BenchmarkFirstEvent compares the time to the first /run_sse event from
// the sidecar directly (an awake agent's path: its Service keeps its
// selector, so the activator is not on it) and through the activator to
// the same ready pod (the path of the requests of a wake, once the pod is
// ready).
func BenchmarkFirstEvent(b *testing.B) {
	f := newFixture(b, fixtureOptions{})
	if err := f.startPod(b.Context()); err != nil {
		b.Fatal(err)
	}
	f.createSession("u", "s")
	for _, path := range []struct{ name, url, host string }{
		{"direct", f.side.URL, ""},
		{"through-activator", f.url, f.host()},
	} {
		b.Run(path.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, path.url+"/run_sse", strings.NewReader(f.runBody("u", "s", "hello")))
				if path.host != "" {
					req.Host = path.host
				}
				req.Header.Set("Authorization", "Bearer "+testToken)
				start := time.Now()
				resp, err := testClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() && !strings.HasPrefix(sc.Text(), "data:") {
				}
				total += time.Since(start)
				for sc.Scan() {
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d", path.name, resp.StatusCode)
				}
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/first-event")
		})
	}
}
