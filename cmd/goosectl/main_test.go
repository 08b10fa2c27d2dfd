package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDispatch(t *testing.T) {
	for name, c := range map[string]struct {
		args             []string
		wantErr, wantOut string
	}{
		"no command":        {nil, "a command is required", ""},
		"unknown command":   {[]string{"serve"}, `unknown command "serve"`, ""},
		"help":              {[]string{"help"}, "", "goosectl chat NAME"},
		"--help":            {[]string{"--help"}, "", "goosectl ui NAME"},
		"ui without NAME":   {[]string{"ui"}, "the GooseAgent NAME is required", ""},
		"ui help":           {[]string{"ui", "-h"}, "", ""},
		"chat without NAME": {[]string{"chat"}, "the GooseAgent NAME (or --url) is required", ""},
		"chat help":         {[]string{"chat", "-h"}, "", ""},
	} {
		var stdout, stderr bytes.Buffer
		err := dispatch(t.Context(), c.args, uiEnv{stdout: &stdout, stderr: &stderr})
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want %q", name, err, c.wantErr)
		case c.wantErr != "" && !strings.Contains(stderr.String(), "usage"):
			t.Errorf("%s: no usage on stderr: %q", name, stderr.String())
		case !strings.Contains(stdout.String(), c.wantOut):
			t.Errorf("%s: stdout %q, want %q", name, stdout.String(), c.wantOut)
		}
	}
}
