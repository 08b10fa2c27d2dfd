package rest

import (
	"encoding/json"
	"time"
)

// Wire types of goosed. Casing is mixed upstream (reference §2 conventions):
// request structs and Session are snake_case; Message, TokenState and
// ConfirmToolActionRequest are camelCase.

type startAgentRequest struct {
	WorkingDir string `json:"working_dir"`
}

type resumeAgentRequest struct {
	SessionID              string `json:"session_id"`
	LoadModelAndExtensions bool   `json:"load_model_and_extensions"`
}

type resumeAgentResponse struct {
	Session wireSession `json:"session"`
}

type updateProviderRequest struct {
	Provider  string `json:"provider"`
	SessionID string `json:"session_id"`
	Model     string `json:"model,omitempty"`
}

type updateSessionRequest struct {
	SessionID string `json:"session_id"`
	GooseMode string `json:"goose_mode"`
}

// chatRequest is the body of the legacy POST /reply (reference §2.2).
type chatRequest struct {
	UserMessage wireMessage `json:"user_message"`
	SessionID   string      `json:"session_id"`
}

type confirmToolActionRequest struct {
	ID        string `json:"id"`
	Action    string `json:"action"`
	SessionID string `json:"sessionId"`
}

type wireMetadata struct {
	UserVisible  bool `json:"userVisible"`
	AgentVisible bool `json:"agentVisible"`
}

// wireMessage is goose's Message (reference §3 "Message"); content items are
// kept raw and decoded by their "type".
type wireMessage struct {
	ID       *string           `json:"id,omitempty"`
	Role     string            `json:"role"`
	Created  int64             `json:"created"`
	Content  []json.RawMessage `json:"content"`
	Metadata wireMetadata      `json:"metadata"`
}

type wireTextContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// wireTokenState is TokenState (reference §3): last call plus accumulated
// session totals; the cache fields exist from 1.39 on and default to 0.
type wireTokenState struct {
	InputTokens                 int64    `json:"inputTokens"`
	OutputTokens                int64    `json:"outputTokens"`
	TotalTokens                 int64    `json:"totalTokens"`
	AccumulatedInputTokens      int64    `json:"accumulatedInputTokens"`
	AccumulatedOutputTokens     int64    `json:"accumulatedOutputTokens"`
	AccumulatedTotalTokens      int64    `json:"accumulatedTotalTokens"`
	AccumulatedCost             *float64 `json:"accumulatedCost"`
	CacheReadTokens             int64    `json:"cacheReadTokens"`
	CacheWriteTokens            int64    `json:"cacheWriteTokens"`
	AccumulatedCacheReadTokens  int64    `json:"accumulatedCacheReadTokens"`
	AccumulatedCacheWriteTokens int64    `json:"accumulatedCacheWriteTokens"`
}

// wireMessageUsage is the 1.41 MessageUsage payload (camelCase, all optional).
type wireMessageUsage struct {
	InputTokens      *int64   `json:"inputTokens"`
	OutputTokens     *int64   `json:"outputTokens"`
	TotalTokens      *int64   `json:"totalTokens"`
	CacheReadTokens  *int64   `json:"cacheReadTokens"`
	CacheWriteTokens *int64   `json:"cacheWriteTokens"`
	Cost             *float64 `json:"cost"`
}

// wireUsage is the 1.41 Session usage object (snake_case).
type wireUsage struct {
	InputTokens           *int64 `json:"input_tokens"`
	OutputTokens          *int64 `json:"output_tokens"`
	TotalTokens           *int64 `json:"total_tokens"`
	CacheReadInputTokens  *int64 `json:"cache_read_input_tokens"`
	CacheWriteInputTokens *int64 `json:"cache_write_input_tokens"`
}

// wireSession is goose's Session (reference §4) in both the 1.37 shape (flat
// token fields) and the 1.41 shape (usage objects).
type wireSession struct {
	ID                      string     `json:"id"`
	WorkingDir              string     `json:"working_dir"`
	Name                    string     `json:"name"`
	CreatedAt               time.Time  `json:"created_at"`
	UpdatedAt               time.Time  `json:"updated_at"`
	MessageCount            int        `json:"message_count"`
	ProviderName            *string    `json:"provider_name"`
	AccumulatedInputTokens  *int64     `json:"accumulated_input_tokens"`
	AccumulatedOutputTokens *int64     `json:"accumulated_output_tokens"`
	AccumulatedTotalTokens  *int64     `json:"accumulated_total_tokens"`
	AccumulatedCost         *float64   `json:"accumulated_cost"`
	AccumulatedUsage        *wireUsage `json:"accumulated_usage"`
}

// wireEvent is MessageEvent (reference §3, `#[serde(tag = "type")]`): the
// variant's fields are flattened next to "type". "message" is a Message for
// type Message and an MCP ServerNotification for type Notification;
// wireEventMessage has the fields of both, so that a frame is decoded in one
// pass, in one place (decoder.feed).
type wireEvent struct {
	Type       string            `json:"type"`
	Message    wireEventMessage  `json:"message"`
	TokenState *wireTokenState   `json:"token_state"`
	Error      string            `json:"error"`
	Reason     string            `json:"reason"`
	RequestID  string            `json:"request_id"`
	MessageID  *string           `json:"message_id"`
	Usage      *wireMessageUsage `json:"usage"`
}

// wireEventMessage is the "message" of a wireEvent: a Message's id, role
// and content, or a Notification's method and params.
type wireEventMessage struct {
	ID      *string       `json:"id"`
	Role    string        `json:"role"`
	Content []wireContent `json:"content"`
	wireServerNotification
}

// wireContent holds the fields of every MessageContent variant this client
// maps (reference §3 "MessageContent").
type wireContent struct {
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Thinking         string          `json:"thinking"`
	ID               string          `json:"id"`
	ToolCall         *wireToolResult `json:"toolCall"`
	ToolResult       *wireToolResult `json:"toolResult"`
	Data             json.RawMessage `json:"data"`
	NotificationType string          `json:"notificationType"`
	Msg              string          `json:"msg"`
}

// wireToolResult is rmcp's Result serialisation used by both toolCall and
// toolResult: {"status":"success","value":...} | {"status":"error","error":...}.
type wireToolResult struct {
	Status string          `json:"status"`
	Value  json.RawMessage `json:"value"`
	Error  string          `json:"error"`
}

type wireToolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type wireCallToolResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent"`
	IsError           bool              `json:"isError"`
}

type wireActionRequired struct {
	ActionType string          `json:"actionType"`
	ID         string          `json:"id"`
	ToolName   string          `json:"toolName"`
	Arguments  json.RawMessage `json:"arguments"`
	Prompt     *string         `json:"prompt"`
}

// wireServerNotification is an rmcp ServerNotification.
type wireServerNotification struct {
	Method string `json:"method"`
	Params struct {
		Progress *float64        `json:"progress"`
		Total    *float64        `json:"total"`
		Message  string          `json:"message"`
		Level    string          `json:"level"`
		Data     json.RawMessage `json:"data"`
	} `json:"params"`
}
