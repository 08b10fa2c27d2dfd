package userinput

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genai"
)

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
		in := Parse(&c)
		var texts []string
		answers := 0
		for _, p := range c.Parts {
			switch {
			case p == nil:
			case p.FunctionResponse != nil:
				if answers >= len(in.Answers) || in.Answers[answers].ID != p.FunctionResponse.ID {
					t.Fatalf("answer %d of %s: %+v", answers, s, in.Answers)
				}
				answers++
			case !p.Thought && p.Text != "":
				texts = append(texts, p.Text)
			}
		}
		if answers != len(in.Answers) || in.Text != strings.Join(texts, "\n") {
			t.Fatalf("%s: text %q, %d answers, want %q and %d", s, in.Text, len(in.Answers), strings.Join(texts, "\n"), answers)
		}
	})
}
