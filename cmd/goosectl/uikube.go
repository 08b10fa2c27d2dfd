package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
	"github.com/adk2goose/goose-operator/controllers/render"
)

// kubeClients reads what goosectl needs with the user's credentials.
// Plain REST clients over a scheme of just core/v1 and the GooseAgent API
// keep goosectl from linking every built-in API group, as the generated
// clientset would.
type kubeClients struct {
	core   rest.Interface
	agents rest.Interface
}

func newKubeClients(cfg *rest.Config) (*kubeClients, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// TokenRequest, posted to the core group's serviceaccounts/token.
	if err := authenticationv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := agentsv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	newClient := func(apiPath string, gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion, c.NegotiatedSerializer = apiPath, &gv, codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("cannot create a Kubernetes client: %w", err)
		}
		return rc, nil
	}
	core, err := newClient("/api", corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	agents, err := newClient("/apis", agentsv1alpha1.GroupVersion)
	if err != nil {
		return nil, err
	}
	return &kubeClients{core: core, agents: agents}, nil
}

// uiTarget is where the UI's traffic goes.
type uiTarget struct {
	Agent   *agentsv1alpha1.GooseAgent
	Service *corev1.Service
	Pod     *corev1.Pod
	// PodPort is the container port the Service's "http" port targets.
	PodPort int32
}

// resolve follows GooseAgent → Service → a ready pod → container port.
func (k *kubeClients) resolve(ctx context.Context, ns, name string) (*uiTarget, error) {
	agent := &agentsv1alpha1.GooseAgent{}
	err := k.agents.Get().Namespace(ns).Resource("gooseagents").Name(name).Do(ctx).Into(agent)
	switch {
	case apierrors.IsNotFound(err) && isNamedNotFound(err, name):
		return nil, fmt.Errorf("GooseAgent %q not found in namespace %q (kubectl get gooseagents -n %s)", name, ns, ns)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("the GooseAgent API (%s) is not installed in this cluster: %w", agentsv1alpha1.GroupVersion, err)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("not allowed to read GooseAgent %s/%s: %w", ns, name, err)
	case err != nil:
		return nil, fmt.Errorf("cannot read GooseAgent %s/%s: %w", ns, name, err)
	}
	t := &uiTarget{Agent: agent}

	svcName := render.ServiceName(agent)
	t.Service = &corev1.Service{}
	err = k.core.Get().Namespace(ns).Resource("services").Name(svcName).Do(ctx).Into(t.Service)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("GooseAgent %s/%s is not ready: its Service %q does not exist yet (is the goose-operator running?)%s",
			ns, name, svcName, readySuffix(agent))
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read Service %s/%s: %w", ns, svcName, err)
	}
	i := slices.IndexFunc(t.Service.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == render.PortName })
	if i < 0 {
		return nil, fmt.Errorf("Service %s/%s has no port named %q", ns, svcName, render.PortName)
	}
	svcPort := t.Service.Spec.Ports[i]
	if c := meta.FindStatusCondition(agent.Status.Conditions, agentsv1alpha1.ConditionParked); c != nil && c.Status == metav1.ConditionTrue {
		return nil, fmt.Errorf("ui: GooseAgent %s/%s is parked (%s: %s): wake it with goosectl wake %s", ns, name, c.Reason, c.Message, name)
	}
	if len(t.Service.Spec.Selector) == 0 {
		return nil, fmt.Errorf("Service %s/%s has no selector, so no pod to forward to", ns, svcName)
	}

	sel := labels.SelectorFromSet(t.Service.Spec.Selector).String()
	pods := &corev1.PodList{}
	err = k.core.Get().Namespace(ns).Resource("pods").Param("labelSelector", sel).Do(ctx).Into(pods)
	if err != nil {
		return nil, fmt.Errorf("cannot list the pods of GooseAgent %s/%s: %w", ns, name, err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; podReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, fmt.Errorf("GooseAgent %s/%s is not ready: none of its %d pods (%s) is ready%s",
			ns, name, len(pods.Items), sel, readySuffix(agent))
	}
	// Sessions live on the pod that created them; the lowest name is the
	// stable choice (ordinal 0 of the StatefulSet) across runs.
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	t.Pod = ready[0]
	if t.PodPort, err = containerPort(t.Pod, svcPort); err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", ns, t.Pod.Name, err)
	}
	return t, nil
}

// isNamedNotFound tells a missing object from a missing resource type: the
// API server names the object only in the former.
func isNamedNotFound(err error, name string) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return d != nil && d.Name == name
}

func readySuffix(a *agentsv1alpha1.GooseAgent) string {
	c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady)
	if c == nil {
		return " (its status has no Ready condition yet)"
	}
	return fmt.Sprintf(" (Ready=%s %s: %s)", c.Status, c.Reason, c.Message)
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// containerPort resolves a Service port's target on a pod, as kubectl
// port-forward svc/… does.
func containerPort(p *corev1.Pod, sp corev1.ServicePort) (int32, error) {
	tp := sp.TargetPort
	switch {
	case tp.Type == intstr.String && tp.StrVal != "":
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == tp.StrVal {
					return cp.ContainerPort, nil
				}
			}
		}
		return 0, fmt.Errorf("no container port named %q", tp.StrVal)
	case tp.Type == intstr.Int && tp.IntVal != 0:
		return tp.IntVal, nil
	}
	return sp.Port, nil
}

// readToken reads the sidecar's inbound token from the Secret the pod
// mounts it from.
func (k *kubeClients) readToken(ctx context.Context, a *agentsv1alpha1.GooseAgent) (token, from string, err error) {
	name, key := render.SecretName(a), render.KeyAuthToken
	if r := a.Spec.Sidecar.Auth.TokenSecretRef; r != nil {
		name, key = r.Name, r.Key
	}
	from = fmt.Sprintf("Secret %s/%s key %s", a.Namespace, name, key)
	hint := "; pass the token with --token-file FILE (or --token) instead"
	s := &corev1.Secret{}
	err = k.core.Get().Namespace(a.Namespace).Resource("secrets").Name(name).Do(ctx).Into(s)
	switch {
	case apierrors.IsForbidden(err):
		return "", "", fmt.Errorf("your credentials may not read %s, which holds the agent's token (kubectl auth can-i get secret/%s -n %s)%s",
			from, name, a.Namespace, hint)
	case apierrors.IsNotFound(err):
		return "", "", fmt.Errorf("%s, which holds the agent's token, does not exist%s", from, hint)
	case err != nil:
		return "", "", fmt.Errorf("cannot read %s: %w%s", from, err, hint)
	}
	token = strings.TrimSpace(string(s.Data[key]))
	if token == "" {
		return "", "", fmt.Errorf("%s is missing or empty%s", from, hint)
	}
	return token, from, nil
}

// podForwarder forwards a loopback port to a pod's port.
type podForwarder interface {
	// Forward returns once the local end (host:port) accepts connections, or
	// with an error and nothing left running. done then yields one value when
	// forwarding ends: nil after ctx ends, an error if the pod went away.
	Forward(ctx context.Context, pod *corev1.Pod, port int32) (local string, done <-chan error, err error)
}

// spdyForwarder is kubectl port-forward's mechanism: the API server's
// pods/portforward subresource, over WebSocket with a SPDY fallback.
type spdyForwarder struct {
	cfg    *rest.Config
	core   rest.Interface
	errOut io.Writer
}

func newSPDYForwarder(cfg *rest.Config, errOut io.Writer) (podForwarder, error) {
	kc, err := newKubeClients(cfg)
	if err != nil {
		return nil, err
	}
	return &spdyForwarder{cfg: cfg, core: kc.core, errOut: errOut}, nil
}

func (f *spdyForwarder) Forward(ctx context.Context, pod *corev1.Pod, port int32) (string, <-chan error, error) {
	u := f.core.Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(f.cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	tunnel, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, f.cfg)
	if err != nil {
		return "", nil, err
	}
	dialer = portforward.NewFallbackDialerForStreaming(tunnel, dialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
	})
	ready := make(chan struct{})
	// The "Forwarding from" and per-connection lines would only be noise.
	pf, err := portforward.NewOnAddressesForStreamingWithContext(ctx, dialer, []string{"127.0.0.1"},
		[]string{"0:" + strconv.Itoa(int(port))}, ready, io.Discard, f.errOut)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return "", nil, err
	}
	ports, _ := pf.GetPorts() // cannot fail once ready is closed
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), done, nil
}
