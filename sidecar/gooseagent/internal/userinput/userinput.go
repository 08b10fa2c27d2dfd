// Package userinput splits an ADK user message into what goose gets: its
// text, and its function responses (answers to tool confirmations).
package userinput

import (
	"strings"

	"google.golang.org/genai"
)

// Answer is one function response the user sent.
type Answer struct {
	ID       string
	Name     string
	Response map[string]any
}

// Input is what an ADK user message carries for goose.
type Input struct {
	Text    string
	Answers []Answer
}

// Parse reads a user message: its text parts that are no thoughts, joined
// by newlines, and its function responses in order. A nil message is empty.
func Parse(c *genai.Content) Input {
	var in Input
	if c == nil {
		return in
	}
	var b strings.Builder
	for _, p := range c.Parts {
		switch {
		case p == nil:
		case p.FunctionResponse != nil:
			in.Answers = append(in.Answers, Answer{ID: p.FunctionResponse.ID, Name: p.FunctionResponse.Name, Response: p.FunctionResponse.Response})
		case !p.Thought && p.Text != "":
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(p.Text)
		}
	}
	in.Text = b.String()
	return in
}
