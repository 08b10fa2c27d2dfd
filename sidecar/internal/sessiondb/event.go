package sessiondb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/adk/model"
	"google.golang.org/adk/session"
)

// eventColumns are the events table's columns as adk-go's database service
// (storageEvent) makes them, in the order eventRow's args and scan use.
const eventColumns = "id, app_name, user_id, session_id, invocation_id, author, actions, long_running_tool_ids_json, " +
	"branch, timestamp, content, grounding_metadata, custom_metadata, usage_metadata, citation_metadata, " +
	"partial, turn_complete, error_code, error_message, interrupted"

const insertEvent = "INSERT INTO events (" + eventColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// eventArgs are ev's column values for insertEvent, stored as adk-go's
// database service stores them (createStorageEvent): actions as a JSON
// blob, the other JSON columns as text or NULL when empty, the optional
// strings NULL when empty.
func eventArgs(app, user, sessionID string, ev *session.Event) ([]any, error) {
	actions, err := json.Marshal(ev.Actions)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal event actions: %w", err)
	}
	var toolIDs any
	if len(ev.LongRunningToolIDs) > 0 {
		if toolIDs, err = jsonText(ev.LongRunningToolIDs); err != nil {
			return nil, fmt.Errorf("failed to marshal long running tool IDs: %w", err)
		}
	}
	var content, grounding, custom, usage, citation any
	for _, c := range []struct {
		dst  *any
		v    any
		set  bool
		name string
	}{
		{&content, ev.Content, ev.Content != nil, "content"},
		{&grounding, ev.GroundingMetadata, ev.GroundingMetadata != nil, "grounding metadata"},
		{&custom, ev.CustomMetadata, len(ev.CustomMetadata) > 0, "custom metadata"},
		{&usage, ev.UsageMetadata, ev.UsageMetadata != nil, "usage metadata"},
		{&citation, ev.CitationMetadata, ev.CitationMetadata != nil, "citation metadata"},
	} {
		if !c.set {
			continue
		}
		if *c.dst, err = jsonText(c.v); err != nil {
			return nil, fmt.Errorf("failed to marshal %s: %w", c.name, err)
		}
	}
	return []any{
		ev.ID, app, user, sessionID, ev.InvocationID, ev.Author, actions, toolIDs,
		nullIfEmpty(ev.Branch), ev.Timestamp, content, grounding, custom, usage, citation,
		ev.Partial, ev.TurnComplete, nullIfEmpty(ev.ErrorCode), nullIfEmpty(ev.ErrorMessage), ev.Interrupted,
	}, nil
}

func jsonText(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// scanEvent reads one row of selectEvents into an event, as adk-go's
// database service reads one (createEventFromStorageEvent).
func scanEvent(rows *sql.Rows) (*session.Event, error) {
	var (
		id, invocationID, author                    string
		actions, toolIDs                            []byte
		content, grounding, custom, usage, citation []byte
		branch, errorCode, errorMessage             sql.NullString
		partial, turnComplete, interrupted          sql.NullBool
		timestamp                                   time.Time
	)
	if err := rows.Scan(&id, &invocationID, &author, &actions, &toolIDs, &branch, &timestamp,
		&content, &grounding, &custom, &usage, &citation, &partial, &turnComplete, &errorCode, &errorMessage, &interrupted); err != nil {
		return nil, fmt.Errorf("failed to read event: %w", err)
	}
	ev := &session.Event{
		ID:           id,
		InvocationID: invocationID,
		Author:       author,
		Timestamp:    timestamp,
		Branch:       branch.String,
		LLMResponse: model.LLMResponse{
			ErrorCode:    errorCode.String,
			ErrorMessage: errorMessage.String,
			Partial:      partial.Bool,
			TurnComplete: turnComplete.Bool,
			Interrupted:  interrupted.Bool,
		},
	}
	for _, c := range []struct {
		src  []byte
		dst  any
		name string
	}{
		{actions, &ev.Actions, "actions"},
		{toolIDs, &ev.LongRunningToolIDs, "long running tool IDs"},
		{content, &ev.Content, "content"},
		{grounding, &ev.GroundingMetadata, "grounding metadata"},
		{custom, &ev.CustomMetadata, "custom metadata"},
		{usage, &ev.UsageMetadata, "usage metadata"},
		{citation, &ev.CitationMetadata, "citation metadata"},
	} {
		if len(c.src) == 0 {
			continue
		}
		if err := json.Unmarshal(c.src, c.dst); err != nil {
			return nil, fmt.Errorf("failed to unmarshal %s of event %s: %w", c.name, id, err)
		}
	}
	return ev, nil
}

// selectEvents reads a session's events, newest first.
const selectEvents = "SELECT id, invocation_id, author, actions, long_running_tool_ids_json, branch, timestamp, " +
	"content, grounding_metadata, custom_metadata, usage_metadata, citation_metadata, " +
	"partial, turn_complete, error_code, error_message, interrupted " +
	"FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
