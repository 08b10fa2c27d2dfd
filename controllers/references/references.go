// Package references lets the operator follow the Secrets and ConfigMaps that
// GooseAgents reference without holding their contents, or anybody else's, in
// memory.
//
// A cluster holds far more Secrets and ConfigMaps than agents reference, and
// most belong to other applications. Caching them whole (the default for a
// watched type) keeps every value of every Secret in the operator's heap. As
// Cluster API does, the operator instead watches their metadata only, trimmed
// to what change detection needs, and reads values from the API server when it
// renders an agent, remembering those of referenced objects until they change.
package references

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// Tracker watches the metadata of Secrets and ConfigMaps and reads their
// values directly from the API server. It is a manager Runnable.
type Tracker struct {
	meta   cache.Cache
	reader client.Reader

	mu sync.Mutex
	// keys remembers single values read by ReadKey (the sidecar token the
	// stats poller needs every interval), each with the resourceVersion it
	// was read at, so a poll costs no API call until the object changes.
	keys map[keyID]keyMemo
	// objects remembers the values Read returned, each with the
	// resourceVersion it was read at, so that many agents referencing one
	// Secret cost one read per change of it, not one per agent.
	objects map[objectID]objectMemo
}

type objectID struct {
	kind            render.RefKind
	namespace, name string
}

type objectMemo struct {
	resourceVersion string
	values          map[string]string
}

type keyID struct {
	kind      render.RefKind
	namespace string
	name, key string
}

type keyMemo struct {
	resourceVersion string
	value           string
}

// New makes a Tracker whose metadata informers use cfg, and whose value
// reads go through reader, which must not be a caching client (the manager's
// API reader).
func New(cfg *rest.Config, scheme *runtime.Scheme, reader client.Reader) (*Tracker, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme: scheme,
		// Only names and versions are kept: labels, annotations, owner
		// references and managed fields can be most of an object's metadata.
		DefaultTransform: trimMetadata,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create reference metadata cache: %w", err)
	}
	return &Tracker{meta: c, reader: reader, keys: map[keyID]keyMemo{}, objects: map[objectID]objectMemo{}}, nil
}

// trimMetadata keeps what change detection and lookups need.
func trimMetadata(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}}, nil
}

// ForManager makes a Tracker on mgr's connection that reads values through
// mgr's API reader, and adds it to mgr so it starts and stops with it.
func ForManager(mgr manager.Manager) (*Tracker, error) {
	t, err := New(mgr.GetConfig(), mgr.GetScheme(), mgr.GetAPIReader())
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(t); err != nil {
		return nil, fmt.Errorf("failed to add reference tracker to manager: %w", err)
	}
	return t, nil
}

// GetCache makes the manager start the Tracker with its own caches and wait
// for it to sync before any controller starts.
func (t *Tracker) GetCache() cache.Cache { return t.meta }

// Start runs the metadata informers until ctx ends. Remembered values are
// dropped when their object is deleted, so they never outlive it.
func (t *Tracker) Start(ctx context.Context) error {
	for _, kind := range []render.RefKind{render.KindSecret, render.KindConfigMap} {
		m, err := metadataOf(kind)
		if err != nil {
			return err
		}
		inf, err := t.meta.GetInformer(ctx, m)
		if err != nil {
			return fmt.Errorf("failed to get %s metadata informer: %w", kind, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(client.Object); ok {
				t.Forget(kind, o.GetNamespace(), o.GetName())
			}
		}}); err != nil {
			return fmt.Errorf("failed to watch %s deletions: %w", kind, err)
		}
	}
	if err := t.meta.Start(ctx); err != nil {
		return fmt.Errorf("failed to run reference metadata cache: %w", err)
	}
	return nil
}

// WaitForCacheSync reports whether the informers have synced.
func (t *Tracker) WaitForCacheSync(ctx context.Context) bool { return t.meta.WaitForCacheSync(ctx) }

// metadataOf returns an empty metadata object of kind.
func metadataOf(kind render.RefKind) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{}
	switch kind {
	case render.KindSecret:
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	case render.KindConfigMap:
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	default:
		return nil, fmt.Errorf("failed to track references: unknown kind %q", kind)
	}
	return m, nil
}

// Source is a watch source for changes to objects of kind, mapped to
// requests by fn (e.g. to the agents referencing the object).
func (t *Tracker) Source(kind render.RefKind, fn handler.TypedMapFunc[*metav1.PartialObjectMetadata, reconcile.Request]) (source.Source, error) {
	m, err := metadataOf(kind)
	if err != nil {
		return nil, err
	}
	return source.Kind(t.meta, m, handler.TypedEnqueueRequestsFromMapFunc(fn)), nil
}

// Read returns every value of one Secret or ConfigMap; found is false when
// it does not exist. Values are read from the API server, and remembered
// until the watched metadata shows a newer version of the object (or none):
// an object the watch has not seen yet is always read.
func (t *Tracker) Read(ctx context.Context, kind render.RefKind, namespace, name string) (map[string]string, bool, error) {
	m, err := metadataOf(kind)
	if err != nil {
		return nil, false, err
	}
	id := objectID{kind: kind, namespace: namespace, name: name}
	nn := types.NamespacedName{Namespace: namespace, Name: name}
	if err := t.meta.Get(ctx, nn, m); err == nil {
		t.mu.Lock()
		memo, ok := t.objects[id]
		t.mu.Unlock()
		if ok && memo.resourceVersion == m.ResourceVersion {
			return maps.Clone(memo.values), true, nil
		}
	}
	values, rv, found, err := t.read(ctx, kind, nn)
	t.mu.Lock()
	if err == nil && found {
		t.objects[id] = objectMemo{resourceVersion: rv, values: maps.Clone(values)}
	} else {
		delete(t.objects, id)
	}
	t.mu.Unlock()
	return values, found, err
}

func (t *Tracker) read(ctx context.Context, kind render.RefKind, key types.NamespacedName) (map[string]string, string, bool, error) {
	switch kind {
	case render.KindSecret:
		s := &corev1.Secret{}
		if err := t.reader.Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", false, nil
			}
			return nil, "", false, fmt.Errorf("failed to read Secret %s: %w", key.Name, err)
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, s.ResourceVersion, true, nil
	case render.KindConfigMap:
		cm := &corev1.ConfigMap{}
		if err := t.reader.Get(ctx, key, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", false, nil
			}
			return nil, "", false, fmt.Errorf("failed to read ConfigMap %s: %w", key.Name, err)
		}
		out := make(map[string]string, len(cm.Data)+len(cm.BinaryData))
		maps.Copy(out, cm.Data)
		for k, v := range cm.BinaryData {
			out[k] = string(v)
		}
		return out, cm.ResourceVersion, true, nil
	}
	return nil, "", false, fmt.Errorf("failed to read reference: unknown kind %q", kind)
}

// ReadKey returns one value of a Secret or ConfigMap. It is meant for values
// read on every poll: the value is remembered with the object's
// resourceVersion and read again only when the watched metadata shows a newer
// one. found is false when the object or the key is absent.
func (t *Tracker) ReadKey(ctx context.Context, kind render.RefKind, namespace, name, key string) (string, bool, error) {
	id := keyID{kind: kind, namespace: namespace, name: name, key: key}
	m, err := metadataOf(kind)
	if err != nil {
		return "", false, err
	}
	nn := types.NamespacedName{Namespace: namespace, Name: name}
	err = t.meta.Get(ctx, nn, m)
	switch {
	case apierrors.IsNotFound(err):
		t.forget(id)
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("failed to look up %s %s: %w", kind, name, err)
	}
	t.mu.Lock()
	memo, ok := t.keys[id]
	t.mu.Unlock()
	if ok && memo.resourceVersion == m.ResourceVersion {
		return memo.value, true, nil
	}
	values, rv, found, err := t.read(ctx, kind, nn)
	if err != nil || !found {
		t.forget(id)
		return "", false, err
	}
	v, ok := values[key]
	if !ok {
		t.forget(id)
		return "", false, nil
	}
	t.mu.Lock()
	t.keys[id] = keyMemo{resourceVersion: rv, value: v}
	t.mu.Unlock()
	return v, true, nil
}

func (t *Tracker) forget(id keyID) {
	t.mu.Lock()
	delete(t.keys, id)
	t.mu.Unlock()
}

// Forget drops every value remembered for objects in namespace named name
// (e.g. when the agent that needed it is gone).
func (t *Tracker) Forget(kind render.RefKind, namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.keys {
		if id.kind == kind && id.namespace == namespace && id.name == name {
			delete(t.keys, id)
		}
	}
	delete(t.objects, objectID{kind: kind, namespace: namespace, name: name})
}

// SidecarToken is the agent's sidecar token, clients' and pods' shared
// one: spec.sidecar.auth.tokenSecretRef's key, else the generated Secret's.
// It is remembered as ReadKey remembers values.
func (t *Tracker) SidecarToken(ctx context.Context, a *agentsv1alpha1.GooseAgent) (string, error) {
	name, key := render.SecretName(a), render.KeyAuthToken
	if ref := a.Spec.Sidecar.Auth.TokenSecretRef; ref != nil {
		name, key = ref.Name, ref.Key
	}
	v, found, err := t.ReadKey(ctx, render.KindSecret, a.Namespace, name, key)
	if err != nil {
		return "", fmt.Errorf("failed to read sidecar token from Secret %s: %w", name, err)
	}
	if !found {
		return "", fmt.Errorf("failed to read sidecar token: Secret %s or its key %q not found", name, key)
	}
	tok := strings.TrimSpace(v)
	if tok == "" {
		return "", fmt.Errorf("failed to read sidecar token: Secret %s has an empty key %q", name, key)
	}
	return tok, nil
}
