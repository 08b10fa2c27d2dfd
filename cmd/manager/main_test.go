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
		o.statsTimeout != 2*time.Second || o.statsConcurrency != 64 || o.concurrency != 4 || o.leaderElect ||
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
