// Package requestkey reads which session or task a request to the sidecar
// is for: from an ADK REST session path, or from an A2A JSON-RPC body.
package requestkey

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// a2aTaskMethods name a task by params.id, in A2A 1.0 and 0.3.
var a2aTaskMethods = []string{"GetTask", "CancelTask", "SubscribeToTask", "tasks/get", "tasks/cancel", "tasks/resubscribe"}

// SessionPath splits /apps/{app}/users/{user}/sessions[/{session}[/...]]
// for app, given escaped (as url.URL.EscapedPath gives it).
func SessionPath(escapedPath, app string) (user, session string, isList, ok bool) {
	seg := strings.Split(strings.TrimSuffix(escapedPath, "/"), "/")
	if len(seg) < 6 || seg[0] != "" || seg[1] != "apps" || seg[3] != "users" || seg[5] != "sessions" {
		return "", "", false, false
	}
	pathApp, err1 := url.PathUnescape(seg[2])
	user, err2 := url.PathUnescape(seg[4])
	if err1 != nil || err2 != nil || pathApp != app || user == "" {
		return "", "", false, false
	}
	if len(seg) == 6 {
		return user, "", true, true
	}
	session, err := url.PathUnescape(seg[6])
	if err != nil || session == "" {
		return "", "", false, false
	}
	return user, session, false, true
}

// A2A reads an A2A JSON-RPC request: a message names its context (an ADK
// session) or else its task, a task method its task. ok reports that it
// names one; then exactly one of contextID and taskID is set.
func A2A(body []byte) (contextID, taskID string, ok bool) {
	var rpc struct {
		Method string `json:"method"`
		Params struct {
			ID      json.RawMessage `json:"id"`
			Message *struct {
				ContextID string `json:"contextId"`
				TaskID    string `json:"taskId"`
			} `json:"message"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &rpc) != nil {
		return "", "", false
	}
	if m := rpc.Params.Message; m != nil {
		switch {
		case m.ContextID != "":
			return m.ContextID, "", true
		case m.TaskID != "":
			return "", m.TaskID, true
		}
		return "", "", false
	}
	var id string
	if slices.Contains(a2aTaskMethods, rpc.Method) && json.Unmarshal(rpc.Params.ID, &id) == nil && id != "" {
		return "", id, true
	}
	return "", "", false
}
