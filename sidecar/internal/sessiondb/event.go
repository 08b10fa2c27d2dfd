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

// eventRow is an event as the events table holds it: its JSON columns
// encoded as adk-go's database service encodes them (createStorageEvent),
// nil where the column is NULL. The event written and the one read back
// both pass through it, and so does the newest event a Cache keeps.
type eventRow struct {
	id, invocationID, author, branch, errorCode, errorMessage string

	actions, toolIDs, content, grounding, custom, usage, citation []byte

	timestamp                          time.Time
	partial, turnComplete, interrupted bool
}

// newEventRow encodes ev: actions always, the other JSON columns when set.
func newEventRow(ev *session.Event) (eventRow, error) {
	r := eventRow{
		id: ev.ID, invocationID: ev.InvocationID, author: ev.Author, branch: ev.Branch,
		errorCode: ev.ErrorCode, errorMessage: ev.ErrorMessage, timestamp: ev.Timestamp,
		partial: ev.Partial, turnComplete: ev.TurnComplete, interrupted: ev.Interrupted,
	}
	var err error
	if r.actions, err = json.Marshal(ev.Actions); err != nil {
		return eventRow{}, fmt.Errorf("failed to marshal event actions: %w", err)
	}
	for _, c := range []struct {
		dst  *[]byte
		v    any
		set  bool
		name string
	}{
		{&r.toolIDs, ev.LongRunningToolIDs, len(ev.LongRunningToolIDs) > 0, "long running tool IDs"},
		{&r.content, ev.Content, ev.Content != nil, "content"},
		{&r.grounding, ev.GroundingMetadata, ev.GroundingMetadata != nil, "grounding metadata"},
		{&r.custom, ev.CustomMetadata, len(ev.CustomMetadata) > 0, "custom metadata"},
		{&r.usage, ev.UsageMetadata, ev.UsageMetadata != nil, "usage metadata"},
		{&r.citation, ev.CitationMetadata, ev.CitationMetadata != nil, "citation metadata"},
	} {
		if !c.set {
			continue
		}
		if *c.dst, err = json.Marshal(c.v); err != nil {
			return eventRow{}, fmt.Errorf("failed to marshal %s: %w", c.name, err)
		}
	}
	return r, nil
}

// args are the row's values for insertEvent: actions as a blob, the other
// JSON columns as text, empty optional strings as NULL.
func (r *eventRow) args(app, user, sessionID string) []any {
	return []any{
		r.id, app, user, sessionID, r.invocationID, r.author, r.actions, textOrNull(r.toolIDs),
		nullIfEmpty(r.branch), r.timestamp, textOrNull(r.content), textOrNull(r.grounding), textOrNull(r.custom),
		textOrNull(r.usage), textOrNull(r.citation),
		r.partial, r.turnComplete, nullIfEmpty(r.errorCode), nullIfEmpty(r.errorMessage), r.interrupted,
	}
}

// size is about how many bytes the row holds.
func (r *eventRow) size() int {
	n := len(r.id) + len(r.invocationID) + len(r.author) + len(r.branch) + len(r.errorCode) + len(r.errorMessage)
	for _, b := range [][]byte{r.actions, r.toolIDs, r.content, r.grounding, r.custom, r.usage, r.citation} {
		n += len(b)
	}
	return n + 320 // the struct with the slices' headers: 296 bytes, in the allocator's 320-byte class
}

func textOrNull(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
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
		r                               eventRow
		branch, errorCode, errorMessage sql.NullString
		partial, turnComplete, interr   sql.NullBool
	)
	if err := rows.Scan(&r.id, &r.invocationID, &r.author, &r.actions, &r.toolIDs, &branch, &r.timestamp,
		&r.content, &r.grounding, &r.custom, &r.usage, &r.citation, &partial, &turnComplete, &errorCode, &errorMessage, &interr); err != nil {
		return nil, fmt.Errorf("failed to read event: %w", err)
	}
	r.branch, r.errorCode, r.errorMessage = branch.String, errorCode.String, errorMessage.String
	r.partial, r.turnComplete, r.interrupted = partial.Bool, turnComplete.Bool, interr.Bool
	return r.event()
}

// event decodes the row.
func (r *eventRow) event() (*session.Event, error) {
	ev := &session.Event{
		ID:           r.id,
		InvocationID: r.invocationID,
		Author:       r.author,
		Timestamp:    r.timestamp,
		Branch:       r.branch,
		LLMResponse: model.LLMResponse{
			ErrorCode:    r.errorCode,
			ErrorMessage: r.errorMessage,
			Partial:      r.partial,
			TurnComplete: r.turnComplete,
			Interrupted:  r.interrupted,
		},
	}
	for _, c := range []struct {
		src  []byte
		dst  any
		name string
	}{
		{r.actions, &ev.Actions, "actions"},
		{r.toolIDs, &ev.LongRunningToolIDs, "long running tool IDs"},
		{r.content, &ev.Content, "content"},
		{r.grounding, &ev.GroundingMetadata, "grounding metadata"},
		{r.custom, &ev.CustomMetadata, "custom metadata"},
		{r.usage, &ev.UsageMetadata, "usage metadata"},
		{r.citation, &ev.CitationMetadata, "citation metadata"},
	} {
		if len(c.src) == 0 {
			continue
		}
		if err := json.Unmarshal(c.src, c.dst); err != nil {
			return nil, fmt.Errorf("failed to unmarshal %s of event %s: %w", c.name, r.id, err)
		}
	}
	return ev, nil
}

// selectEvents reads a session's events, newest first.
const selectEvents = "SELECT id, invocation_id, author, actions, long_running_tool_ids_json, branch, timestamp, " +
	"content, grounding_metadata, custom_metadata, usage_metadata, citation_metadata, " +
	"partial, turn_complete, error_code, error_message, interrupted " +
	"FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?"
