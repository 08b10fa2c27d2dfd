package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseDefaults(t *testing.T) {
	o, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.gooseImage != DefaultGooseImage || o.sidecarImage != DefaultSidecarImage || o.statsInterval != 30*time.Second ||
		o.statsTimeout != 2*time.Second || o.statsConcurrency != 64 || o.concurrency != 16 || o.qps != 200 || o.burst != 400 || o.leaderElect ||
		o.activatorAddr != "0" || o.activatorMaxHeld != 256 || o.activatorHoldTimeout != 2*time.Minute {
		t.Fatalf("unexpected defaults: %+v", o)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stats-interval=10ms"}, "--stats-interval"},
		{[]string{"--stats-max-concurrent=0"}, "--stats-max-concurrent"},
		{[]string{"--max-concurrent-reconciles=0"}, "--max-concurrent-reconciles"},
		{[]string{"--goose-image="}, "--goose-image"},
		{[]string{"--activator-bind-address=8085"}, "--activator-bind-address"},
		{[]string{"--activator-bind-address=:http"}, "--activator-bind-address"},
		{[]string{"--activator-pod-selector=a=b=c"}, "--activator-pod-selector"},
		{[]string{"--activator-max-held=0"}, "--activator-max-held"},
		{[]string{"--activator-hold-timeout=0s"}, "--activator-hold-timeout"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		_, err := parse(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%v) = %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

// TestActivator: the activator's port and pods, or none when it is off or
// the manager does not know its namespace.
func TestActivator(t *testing.T) {
	o, err := parse([]string{"--activator-bind-address=:8085"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := activator(o, "goose-system")
	if err != nil || a == nil || a.Port != 8085 || a.Namespace != "goose-system" ||
		a.Selector.String() != "app.kubernetes.io/component=manager,app.kubernetes.io/name=goose-operator" {
		t.Fatalf("activator = %+v, %v", a, err)
	}
	if p := activatorPeer(o, a); p == nil || p.Namespace != "goose-system" || p.Pods.MatchLabels["app.kubernetes.io/component"] != "manager" {
		t.Fatalf("activator peer = %+v", p)
	}
	if a, err := activator(o, ""); a != nil || err != nil {
		t.Fatalf("without POD_NAMESPACE: %+v, %v", a, err)
	}
	off, _ := parse(nil, io.Discard)
	if a, err := activator(off, "goose-system"); a != nil || err != nil {
		t.Fatalf("with the activator off: %+v, %v", a, err)
	}
}
