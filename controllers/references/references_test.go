package references_test

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/adk2goose/goose-operator/controllers/references"
	"github.com/adk2goose/goose-operator/controllers/render"
	"github.com/adk2goose/goose-operator/internal/testing/poll"
	"github.com/adk2goose/goose-operator/internal/testing/testenv"
)

func start(t *testing.T, env *testenv.Env, reads *atomic.Int64) *references.Tracker {
	t.Helper()
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	counted := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	tr, err := references.New(env.Config, env.Scheme, counted)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunSynced(t, tr)
	return tr
}

// TestReadKeyRemembersUntilChanged: a value polled every interval costs one
// apiserver read per change of its Secret, not one per poll; a changed or
// deleted Secret is never answered from memory once the watch has seen it.
func TestReadKeyRemembersUntilChanged(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "default"}, StringData: map[string]string{"k": "v1"}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	tr := start(t, env, &reads)

	read := func() (string, bool) {
		t.Helper()
		v, found, err := tr.ReadKey(ctx, render.KindSecret, "default", "token", "k")
		if err != nil {
			t.Fatal(err)
		}
		return v, found
	}
	poll.Until(t, "the Secret to be seen", func() bool { _, ok := read(); return ok })
	before := reads.Load()
	for range 10 {
		if v, _ := read(); v != "v1" {
			t.Fatalf("value %q, want v1", v)
		}
	}
	if n := reads.Load() - before; n != 0 {
		t.Errorf("10 polls of an unchanged Secret made %d apiserver reads, want 0", n)
	}

	s.Data = map[string][]byte{"k": []byte("v2")}
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the new value", func() bool { v, _ := read(); return v == "v2" })

	if v, found := func() (string, bool) {
		v, found, err := tr.ReadKey(ctx, render.KindSecret, "default", "token", "missing")
		if err != nil {
			t.Fatal(err)
		}
		return v, found
	}(); found || v != "" {
		t.Errorf("absent key: %q, %v; want not found", v, found)
	}

	if err := env.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the deletion", func() bool { _, ok := read(); return !ok })

	values, found, err := tr.Read(ctx, render.KindSecret, "default", "token")
	if err != nil || found || values != nil {
		t.Errorf("Read of a deleted Secret = %v, %v, %v; want not found", values, found, err)
	}
}

// TestReadRemembersUntilChanged: many agents rendering with one Secret cost
// one apiserver read per change of it, not one per agent; a changed or
// deleted Secret is never answered from memory once the watch has seen it.
func TestReadRemembersUntilChanged(t *testing.T) {
	env := testenv.Start(t)
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "api-key", Namespace: "default"}, StringData: map[string]string{"k": "v1"}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var reads atomic.Int64
	tr := start(t, env, &reads)
	read := func() map[string]string {
		t.Helper()
		v, _, err := tr.Read(ctx, render.KindSecret, "default", "api-key")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	poll.Until(t, "the Secret to be seen", func() bool {
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		return tr.GetCache().Get(ctx, client.ObjectKeyFromObject(s), m) == nil
	})
	if v := read(); v["k"] != "v1" {
		t.Fatalf("values %v, want k=v1", v)
	}
	before := reads.Load()
	for range 10 {
		v := read()
		if v["k"] != "v1" {
			t.Fatalf("values %v, want k=v1", v)
		}
		v["k"] = "changed by a caller" // must not reach the next caller
	}
	if n := reads.Load() - before; n != 0 {
		t.Errorf("10 reads of an unchanged Secret made %d apiserver reads, want 0", n)
	}
	s.Data = map[string][]byte{"k": []byte("v2")}
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the new value", func() bool { return read()["k"] == "v2" })
	if err := env.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the deletion", func() bool { return read() == nil })
}
