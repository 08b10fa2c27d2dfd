package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	agentsv1alpha1 "github.com/adk2goose/goose-operator/api/v1alpha1"
)

// agentCmd is one of list, get, park and wake: the commands that read or
// change GooseAgents with the user's kubeconfig, and nothing else.
type agentCmd struct {
	name, namespace, kubeconfig, context string
	allNamespaces                        bool
}

const agentCmdUsage = `usage: goosectl %s [-n NAMESPACE] [--kubeconfig FILE] [--context CTX]
`

// parseAgentCmd accepts flags before and after NAME, as kubectl does.
func parseAgentCmd(cmd string, args []string, needName bool, stderr io.Writer) (*agentCmd, error) {
	o := &agentCmd{}
	fs := flag.NewFlagSet("goosectl "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	use := cmd
	if needName {
		use += " NAME"
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, agentCmdUsage+"\nflags:\n", use)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.namespace, "n", "", "namespace (default: the kubeconfig context's namespace)")
	fs.StringVar(&o.namespace, "namespace", "", "same as -n")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context (default: the current context)")
	if !needName {
		fs.BoolVar(&o.allNamespaces, "A", false, "list the agents of every namespace")
	}
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case needName && len(names) != 1:
		fs.Usage()
		return nil, errors.New("the GooseAgent NAME is required, once")
	case !needName && len(names) > 0:
		fs.Usage()
		return nil, fmt.Errorf("unexpected arguments: %v", names)
	}
	if needName {
		o.name = names[0]
	}
	return o, nil
}

// clients loads the kubeconfig and resolves the namespace.
func (o *agentCmd) clients() (*kubeClients, string, error) {
	loader := clientcmd.NewDefaultClientConfigLoadingRules()
	loader.ExplicitPath = o.kubeconfig
	kcfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loader, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := kcfg.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("cannot load kubeconfig: %w", err)
	}
	ns := o.namespace
	if ns == "" && !o.allNamespaces {
		if ns, _, err = kcfg.Namespace(); err != nil {
			return nil, "", fmt.Errorf("cannot read the kubeconfig's namespace: %w", err)
		}
	}
	kc, err := newKubeClients(cfg)
	return kc, ns, err
}

// runAgentCmd runs list, get, park or wake.
func runAgentCmd(ctx context.Context, cmd string, args []string, env uiEnv) error {
	o, err := parseAgentCmd(cmd, args, cmd != "list", env.stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	kc, ns, err := o.clients()
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	now := time.Now()
	switch cmd {
	case "list":
		list := &agentsv1alpha1.GooseAgentList{}
		req := kc.agents.Get().Resource("gooseagents")
		if !o.allNamespaces {
			req = req.Namespace(ns)
		}
		if err := req.Do(ctx).Into(list); err != nil {
			return fmt.Errorf("list: cannot list GooseAgents: %w", err)
		}
		return printList(env.stdout, list.Items, o.allNamespaces, now)
	case "get":
		a, err := kc.getAgent(ctx, cmd, ns, o.name)
		if err != nil {
			return err
		}
		printAgent(env.stdout, a, now)
		return nil
	case "park":
		if _, err := kc.getAgent(ctx, cmd, ns, o.name); err != nil {
			return err
		}
		patch := map[string]any{"spec": map[string]any{"idle": map[string]any{"parked": true}}}
		if err := kc.patchAgent(ctx, ns, o.name, patch); err != nil {
			return fmt.Errorf("park: %w", err)
		}
		fmt.Fprintf(env.stdout, "GooseAgent %s/%s parked by hand: requests get 503 until `goosectl wake %s`\n", ns, o.name, o.name)
		return nil
	default: // wake
		a, err := kc.getAgent(ctx, cmd, ns, o.name)
		if err != nil {
			return err
		}
		// The annotation wakes an agent parked for idleness; clearing
		// spec.idle.parked one parked by hand.
		patch := map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			agentsv1alpha1.WakeRequestedAtAnnotation: now.UTC().Format(time.RFC3339Nano)}}}
		if a.Spec.Idle != nil && a.Spec.Idle.Parked {
			patch["spec"] = map[string]any{"idle": map[string]any{"parked": nil}}
		}
		if err := kc.patchAgent(ctx, ns, o.name, patch); err != nil {
			return fmt.Errorf("wake: %w", err)
		}
		fmt.Fprintf(env.stdout, "GooseAgent %s/%s asked to wake (goosectl get %s shows when a pod is ready)\n", ns, o.name, o.name)
		return nil
	}
}

func (k *kubeClients) getAgent(ctx context.Context, cmd, ns, name string) (*agentsv1alpha1.GooseAgent, error) {
	a := &agentsv1alpha1.GooseAgent{}
	err := k.agents.Get().Namespace(ns).Resource("gooseagents").Name(name).Do(ctx).Into(a)
	switch {
	case apierrors.IsNotFound(err) && isNamedNotFound(err, name):
		return nil, fmt.Errorf("%s: GooseAgent %q not found in namespace %q", cmd, name, ns)
	case err != nil:
		return nil, fmt.Errorf("%s: cannot read GooseAgent %s/%s: %w", cmd, ns, name, err)
	}
	return a, nil
}

func (k *kubeClients) patchAgent(ctx context.Context, ns, name string, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("cannot encode the patch: %w", err)
	}
	err = k.agents.Patch(types.MergePatchType).Namespace(ns).Resource("gooseagents").Name(name).Body(body).Do(ctx).Error()
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("not allowed to patch GooseAgent %s/%s (kubectl auth can-i patch gooseagents -n %s): %w", ns, name, ns, err)
	}
	if err != nil {
		return fmt.Errorf("cannot patch GooseAgent %s/%s: %w", ns, name, err)
	}
	return nil
}

// parkState is the PARKED column: no without spec.idle's condition, else
// the Parked condition's reason.
func parkState(a *agentsv1alpha1.GooseAgent) string {
	c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionParked)
	switch {
	case c == nil:
		return "-"
	case c.Status == metav1.ConditionTrue:
		return "yes (" + c.Reason + ")"
	case c.Reason == agentsv1alpha1.ReasonWaking:
		return "waking"
	}
	return "no"
}

// ago says how long before now t was, to the second; "-" for no time.
func ago(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return now.Sub(t.Time).Truncate(time.Second).String() + " ago"
}

func readyOf(a *agentsv1alpha1.GooseAgent) (status, reason, message string) {
	c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionReady)
	if c == nil {
		return "Unknown", "-", ""
	}
	return string(c.Status), c.Reason, c.Message
}

func printList(w io.Writer, agents []agentsv1alpha1.GooseAgent, withNamespace bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tREADY\tREASON\tPARKED\tPARKED-SINCE\tLAST-ACTIVE\tSESSIONS\tTOKENS"
	if withNamespace {
		head = "NAMESPACE\t" + head
	}
	fmt.Fprintln(tw, head)
	for i := range agents {
		a := &agents[i]
		status, reason, _ := readyOf(a)
		var parkedAt, lastActive *metav1.Time
		if st := a.Status.Idle; st != nil {
			parkedAt, lastActive = st.ParkedAt, st.LastActivityAt
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d", a.Name, status, reason, parkState(a),
			ago(parkedAt, now), ago(lastActive, now), a.Status.Sessions.Total, a.Status.Tokens.Total)
		if withNamespace {
			row = a.Namespace + "\t" + row
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

func printAgent(w io.Writer, a *agentsv1alpha1.GooseAgent, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	line := func(k, format string, args ...any) {
		fmt.Fprintf(tw, "%s:\t"+format+"\n", append([]any{k}, args...)...)
	}
	line("Name", "%s/%s", a.Namespace, a.Name)
	status, reason, msg := readyOf(a)
	line("Ready", "%s (%s) %s", status, reason, msg)
	parked := parkState(a)
	if c := meta.FindStatusCondition(a.Status.Conditions, agentsv1alpha1.ConditionParked); c != nil {
		parked += ": " + c.Message
	}
	line("Parked", "%s", parked)
	idle := "never parked for idleness"
	if a.Spec.Idle != nil && a.Spec.Idle.After != nil {
		idle = "parked after " + a.Spec.Idle.After.Duration.String() + " without a turn"
	}
	line("Idle", "%s", idle)
	if st := a.Status.Idle; st != nil {
		for _, t := range []struct {
			k string
			v *metav1.Time
		}{{"Parked at", st.ParkedAt}, {"Last active", st.LastActivityAt}, {"Woken at", st.WokenAt}} {
			if t.v != nil {
				line(t.k, "%s (%s)", t.v.UTC().Format(time.RFC3339), ago(t.v, now))
			}
		}
	}
	line("Replicas", "%d/%d ready", a.Status.ReadyReplicas, a.Status.Replicas)
	s := a.Status.Sessions
	line("Sessions", "%d (%d active, %d users)", s.Total, s.Active, s.Users)
	tk := a.Status.Tokens
	line("Tokens", "%d (input %d, output %d)", tk.Total, tk.Input, tk.Output)
	if a.Status.StatsUpdatedAt != nil {
		line("Figures from", "%s (%s)", a.Status.StatsUpdatedAt.UTC().Format(time.RFC3339), ago(a.Status.StatsUpdatedAt, now))
	}
	if a.Status.Endpoints.REST != "" {
		line("Endpoint", "%s", a.Status.Endpoints.REST)
	}
	var others []string
	for _, c := range a.Status.Conditions {
		if c.Type != agentsv1alpha1.ConditionReady && c.Type != agentsv1alpha1.ConditionParked {
			others = append(others, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
		}
	}
	if len(others) > 0 {
		line("Conditions", "%s", strings.Join(others, ", "))
	}
	_ = tw.Flush()
}
