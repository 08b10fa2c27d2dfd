package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/adk2goose/goose-operator/sidecar/goose/goosetest"
)

// toolHost is what the scripted model needs of the session's extensions.
type toolHost interface {
	Tools(sessionID string) []string
	Call(sessionID, name string, args json.RawMessage) (string, bool)
	WorkingDir(sessionID string) string
}

// newScript is the stand-in's model. It echoes the user's text, except for
// two requests a real model answers from the tools goose offers it, and a
// slow answer:
//
//	list tools           the session's tool names, as goose offers them
//	call TOOL [ARGS]     one call of TOOL with the JSON object ARGS, which
//	                     goose runs through the extension's MCP server
//	slow N               N deltas a second apart, then "slow done": a turn
//	                     still running when a test stops the pod
//	write NAME TEXT      writes TEXT to the file NAME of the session's
//	                     working directory, as goose's shell would
//	read NAME            the content of that file, or "NAME: no such file"
//
// Every reply ends naming the pod and the goose session that answered, so
// tests see where a turn ran.
func newScript(host toolHost, pod string) goosetest.Script {
	return func(sessionID, text string) goosetest.Reply {
		r := toolReply(host, sessionID, strings.TrimSpace(text))
		if r == nil {
			r = fileReply(host.WorkingDir(sessionID), strings.TrimSpace(text))
		}
		if r == nil {
			r = slowReply(strings.TrimSpace(text))
		}
		if r == nil {
			echo := goosetest.Echo(sessionID, text)
			r = &echo
		}
		r.Steps = append(r.Steps, goosetest.Step{Text: fmt.Sprintf(" [pod=%s goose-session=%s]", pod, sessionID)})
		return *r
	}
}

func toolReply(host toolHost, sessionID, text string) *goosetest.Reply {
	usage := goosetest.Step{Usage: &goosetest.UsageStep{Input: int64(10 + len(text)), Output: 8}}
	if strings.EqualFold(text, "list tools") {
		tools := host.Tools(sessionID)
		list := "none"
		if len(tools) > 0 {
			list = strings.Join(tools, ", ")
		}
		return &goosetest.Reply{Steps: []goosetest.Step{{Text: "tools: " + list}, usage}}
	}
	rest, ok := strings.CutPrefix(text, "call ")
	if !ok {
		return nil
	}
	name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return &goosetest.Reply{Steps: []goosetest.Step{{Text: "the arguments of " + name + " are not JSON: " + args}, usage}}
	}
	return &goosetest.Reply{Steps: []goosetest.Step{
		{Tool: &goosetest.ToolStep{ID: toolCallID(), Name: name, Arguments: json.RawMessage(args),
			Run: func() (string, bool) { return host.Call(sessionID, name, json.RawMessage(args)) }}},
		usage,
		{Text: "called " + name},
	}}
}

// slowReply answers "slow N" (N from 1 to 300), nil for other texts.
func slowReply(text string) *goosetest.Reply {
	rest, ok := strings.CutPrefix(text, "slow ")
	n, err := strconv.Atoi(strings.TrimSpace(rest))
	if !ok || err != nil || n < 1 || n > 300 {
		return nil
	}
	r := &goosetest.Reply{}
	for i := 1; i <= n; i++ {
		r.Steps = append(r.Steps, goosetest.Step{Delay: time.Second, Text: fmt.Sprintf("tick %d ", i)})
	}
	r.Steps = append(r.Steps, goosetest.Step{Text: "slow done"},
		goosetest.Step{Usage: &goosetest.UsageStep{Input: int64(10 + len(text)), Output: int64(n + 2)}})
	return r
}

// fileReply answers "write NAME TEXT" and "read NAME" in dir, nil for
// other texts. NAME is one path element: the files stay in dir.
func fileReply(dir, text string) *goosetest.Reply {
	verb, rest, _ := strings.Cut(text, " ")
	name, content, _ := strings.Cut(strings.TrimSpace(rest), " ")
	if (verb != "write" && verb != "read") || name == "" {
		return nil
	}
	usage := goosetest.Step{Usage: &goosetest.UsageStep{Input: int64(10 + len(text)), Output: 8}}
	reply := func(s string) *goosetest.Reply {
		return &goosetest.Reply{Steps: []goosetest.Step{{Text: s}, usage}}
	}
	if dir == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return reply("cannot use file " + name + " in working directory " + dir)
	}
	path := filepath.Join(dir, name)
	if verb == "write" {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return reply("write failed: " + err.Error())
		}
		return reply("wrote " + name + " in " + dir)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return reply(name + ": no such file in " + dir)
	}
	return reply(name + ": " + string(b))
}

// toolCallID is a provider-style tool call id, unique per call.
func toolCallID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "call_" + hex.EncodeToString(b)
}
