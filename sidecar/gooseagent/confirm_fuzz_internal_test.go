package gooseagent

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genai"
)

// A client's answer to a confirmation is outside input: any JSON object
// gives a decision or an error, the same each time, and a decision only
// when the object says one ("confirmed", or a lone "response").
func FuzzParseConfirmation(f *testing.F) {
	for _, s := range []string{
		`{"confirmed":true}`, `{"confirmed":"FALSE"}`, `{"response":"{\"confirmed\":true}"}`, `{"response":"Yes."}`,
		`{"response":"maybe"}`, `{"response":"null"}`, `{"response":"{}","extra":1}`, `{"ok":1}`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) != nil {
			return
		}
		ok, err := ParseConfirmation(m)
		ok2, err2 := ParseConfirmation(m)
		if ok != ok2 || (err == nil) != (err2 == nil) {
			t.Fatalf("two readings of %s: %v %v, %v %v", s, ok, err, ok2, err2)
		}
		if err != nil {
			if ok {
				t.Fatalf("%s: approved with an error: %v", s, err)
			}
			return
		}
		_, confirmed := m["confirmed"]
		_, response := m["response"]
		if !confirmed && !(response && len(m) == 1) {
			t.Fatalf("%s: a decision (%v) from an object that states none", s, ok)
		}
	})
}

// A user message's parts are outside input: its text is the non-thought
// text parts joined, its answers every function response, in order.
func FuzzParseInput(f *testing.F) {
	f.Add(`{"role":"user","parts":[{"text":"hi"},{"text":"there","thought":true},{"functionResponse":{"id":"a","name":"adk_request_confirmation","response":{"confirmed":true}}}]}`)
	f.Add(`{"parts":[null,{"text":""},{"functionResponse":{}}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var c genai.Content
		if json.Unmarshal([]byte(s), &c) != nil {
			return
		}
		in := parseInput(&c)
		var texts []string
		answers := 0
		for _, p := range c.Parts {
			switch {
			case p == nil:
			case p.FunctionResponse != nil:
				if answers >= len(in.answers) || in.answers[answers].id != p.FunctionResponse.ID {
					t.Fatalf("answer %d of %s: %+v", answers, s, in.answers)
				}
				answers++
			case !p.Thought && p.Text != "":
				texts = append(texts, p.Text)
			}
		}
		if answers != len(in.answers) || in.text != strings.Join(texts, "\n") {
			t.Fatalf("%s: text %q, %d answers, want %q and %d", s, in.text, len(in.answers), strings.Join(texts, "\n"), answers)
		}
	})
}
