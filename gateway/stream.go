package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// Streaming ("stream": true) writes a call's answer as server-sent events, in the chunks and
// events OpenAI and vLLM stream. The model side does not stream: the answer is generated
// whole and recorded in its session first, then written as events, so that a client going
// away mid-stream leaves its session with the whole call recorded, never part of one.

// streamOptions is a request's stream_options.
type streamOptions struct {
	IncludeUsage         bool `json:"include_usage"`
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// checkStream checks stream and stream_options.
func (f *samplingFields) checkStream() error {
	switch {
	case f.StreamOptions != nil && !f.Stream:
		return vllmapi.BadRequest("stream_options can only be set when stream is true")
	case f.StreamOptions != nil && f.StreamOptions.ContinuousUsageStats:
		return vllmapi.BadRequest("stream_options.continuous_usage_stats is not supported by the gateway (use include_usage)")
	}
	return nil
}

// includeUsage reports whether a usage chunk ends the stream.
func (f *samplingFields) includeUsage() bool {
	return f.StreamOptions != nil && f.StreamOptions.IncludeUsage
}

// sseWriter writes server-sent events, flushing each. After a failed write (the client went
// away) it writes nothing more.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	seq int // the next Responses event's sequence_number
	err error
}

// startStream writes the header of an event stream, with the call's session headers.
func startStream(w http.ResponseWriter, c *call) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.setHeaders(w)
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes v as one event's data, named event unless event is empty.
func (s *sseWriter) send(event string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		s.err = err
	}
	s.write(event, data)
}

func (s *sseWriter) write(event string, data []byte) {
	if s.err != nil {
		return
	}
	var b bytes.Buffer
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString("\n\n")
	if _, s.err = s.w.Write(b.Bytes()); s.err == nil {
		s.err = s.rc.Flush()
	}
}

// done ends a chat or completion stream.
func (s *sseWriter) done() { s.write("", []byte("[DONE]")) }

// piece is the part of a reply's text that tokens [first, last) wrote: bytes [start, end).
type piece struct {
	start, end  int
	first, last int
}

// textPieces splits a call's reply at its tokens: one piece per token when the tokens' texts
// are known and make up the text (a token whose text is not there, a special token the text
// skips, writes nothing), else one piece of the whole text and all tokens.
func textPieces(c *call) []piece {
	n, text := len(c.reply.Tokens), c.reply.Text
	whole := []piece{{0, len(text), 0, n}}
	if n == 0 || len(c.texts) != n {
		return whole
	}
	out := make([]piece, n)
	off := 0
	for i, t := range c.texts {
		if !strings.HasPrefix(text[off:], t) {
			t = ""
		}
		out[i] = piece{off, off + len(t), i, i + 1}
		off += len(t)
	}
	if off != len(text) {
		return whole
	}
	return out
}

// textSpan is where a part of a reply (its reasoning, its content) lies in the reply's text.
type textSpan struct {
	text       string
	start, end int
	found      bool
}

// locate finds part in text at or after from.
func locate(text, part string, from int) textSpan {
	from = min(from, len(text))
	i := strings.Index(text[from:], part)
	if i < 0 {
		return textSpan{text: part}
	}
	return textSpan{text: part, start: from + i, end: from + i + len(part), found: true}
}

// in is the span's text that piece p (the k-th) wrote; a span not found in the reply is
// written whole with the first piece.
func (sp textSpan) in(text string, p piece, k int) string {
	if !sp.found {
		if k == 0 {
			return sp.text
		}
		return ""
	}
	a, b := max(sp.start, p.start), min(sp.end, p.end)
	if a >= b {
		return ""
	}
	return text[a:b]
}

// chatChunk is a chat.completion.chunk.
type chatChunk struct {
	ID             string        `json:"id"`
	Object         string        `json:"object"`
	Created        int64         `json:"created"`
	Model          string        `json:"model"`
	Choices        []chunkChoice `json:"choices"`
	Usage          *usage        `json:"usage,omitempty"`
	PromptTokenIDs []int32       `json:"prompt_token_ids,omitempty"`
}

type chunkChoice struct {
	Index int `json:"index"`
	// SessionID is, on a choice's first chunk of a call with n > 1, the session its sample
	// is recorded in.
	SessionID    string        `json:"session_id,omitempty"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        *string         `json:"reasoning,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index int `json:"index"`
	apiToolCall
}

// streamChat writes a chat completion as chunks, choice after choice: the role, then per
// token piece the reasoning and content it wrote (with its logprobs and token ids), the tool
// calls and the finish reason; then the usage when asked for, and [DONE].
func (g *Gateway) streamChat(w http.ResponseWriter, c *call, resp *chatResponse, includeUsage bool) {
	s := startStream(w, c)
	chunk := func(chs ...chunkChoice) chatChunk {
		return chatChunk{ID: resp.ID, Object: "chat.completion.chunk", Created: resp.Created, Model: resp.Model, Choices: append([]chunkChoice{}, chs...)}
	}
	for i, sc := range c.all() {
		streamChatChoice(s, sc, &resp.Choices[i], chunk, resp.PromptTokenIDs)
		resp.PromptTokenIDs = nil // with the first chunk only
	}
	if includeUsage {
		u := chunk()
		u.Usage = &resp.Usage
		s.send("", u)
	}
	s.done()
	g.endStream(c, s)
}

// streamChatChoice writes the chunks of one choice, the sample c.
func streamChatChoice(s *sseWriter, c *call, choice *chatChoice, chunk func(...chunkChoice) chatChunk, promptTokenIDs []int32) {
	msg := choice.Message
	first := chunk(chunkChoice{Index: choice.Index, SessionID: choice.SessionID, Delta: chatDelta{Role: msg.Role}})
	// Empty texts begin the fields the answer has, so that a reply's empty content or
	// reasoning reassembles as empty, not absent.
	if msg.Content != nil {
		first.Choices[0].Delta.Content = new(string)
	}
	if msg.ReasoningContent != nil {
		first.Choices[0].Delta.ReasoningContent, first.Choices[0].Delta.Reasoning = new(string), new(string)
	}
	first.PromptTokenIDs = promptTokenIDs
	s.send("", first)

	text := c.reply.Text
	var reasoning, content textSpan
	from := 0
	if msg.ReasoningContent != nil {
		reasoning = locate(text, *msg.ReasoningContent, 0)
		if reasoning.found {
			from = reasoning.end + len(thinkEnd)
		}
	}
	if msg.Content != nil {
		content = locate(text, *msg.Content, from)
	}
	for k, p := range textPieces(c) {
		ch := chunkChoice{Index: choice.Index}
		if r := reasoning.in(text, p, k); r != "" {
			ch.Delta.ReasoningContent, ch.Delta.Reasoning = &r, &r
		}
		if t := content.in(text, p, k); t != "" {
			ch.Delta.Content = &t
		}
		if choice.Logprobs != nil {
			ch.Logprobs = &chatLogprobs{Content: choice.Logprobs.Content[p.first:p.last]}
		}
		if choice.TokenIDs != nil {
			ch.TokenIDs = choice.TokenIDs[p.first:p.last]
		}
		if ch.Delta.Content != nil || ch.Delta.Reasoning != nil || p.last > p.first && (ch.Logprobs != nil || ch.TokenIDs != nil) {
			s.send("", chunk(ch))
		}
	}
	for i, tc := range msg.ToolCalls {
		s.send("", chunk(chunkChoice{Index: choice.Index, Delta: chatDelta{ToolCalls: []toolCallDelta{{Index: i, apiToolCall: tc}}}}))
	}
	s.send("", chunk(chunkChoice{Index: choice.Index, FinishReason: &choice.FinishReason}))
}

// endStream logs a stream the client did not read to its end.
func (g *Gateway) endStream(c *call, s *sseWriter) {
	if s.err != nil {
		g.log.Info("client went away during the stream; the call is recorded whole", "session", c.key, "err", s.err)
	}
}

// completionChunk is a streamed text_completion.
type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   *usage                  `json:"usage,omitempty"`
}

type completionChunkChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	TokenIDs       []int32             `json:"token_ids,omitempty"`
	PromptTokenIDs []int32             `json:"prompt_token_ids,omitempty"`
	// SessionID is, on a choice's first chunk of a call with n > 1, the session its sample
	// is recorded in.
	SessionID string `json:"session_id,omitempty"`
}

// streamCompletion writes a completion as chunks, choice after choice: per token piece its
// text (with its logprobs and token ids) and the finish reason; then the usage when asked
// for, and [DONE]. A choice's first chunk carries the prompt's token ids when they were asked
// for.
func (g *Gateway) streamCompletion(w http.ResponseWriter, c *call, resp *completionResponse, includeUsage bool) {
	s := startStream(w, c)
	chunk := func(chs ...completionChunkChoice) completionChunk {
		return completionChunk{ID: resp.ID, Object: "text_completion", Created: resp.Created, Model: resp.Model, Choices: append([]completionChunkChoice{}, chs...)}
	}
	for i, sc := range c.all() {
		choice := &resp.Choices[i]
		prompt, session := choice.PromptTokenIDs, choice.SessionID // with the choice's first chunk
		for _, p := range textPieces(sc) {
			if p.start == p.end && p.first == p.last {
				continue
			}
			ch := completionChunkChoice{Index: i, Text: sc.reply.Text[p.start:p.end], PromptTokenIDs: prompt, SessionID: session}
			prompt, session = nil, ""
			if lp := choice.Logprobs; lp != nil {
				ch.Logprobs = &completionLogprobs{
					TextOffset: lp.TextOffset[p.first:p.last], TokenLogprobs: lp.TokenLogprobs[p.first:p.last],
					Tokens: lp.Tokens[p.first:p.last], TopLogprobs: lp.TopLogprobs[p.first:p.last],
				}
			}
			if choice.TokenIDs != nil {
				ch.TokenIDs = choice.TokenIDs[p.first:p.last]
			}
			s.send("", chunk(ch))
		}
		s.send("", chunk(completionChunkChoice{Index: i, FinishReason: &choice.FinishReason, PromptTokenIDs: prompt, SessionID: session}))
	}
	if includeUsage {
		u := chunk()
		u.Usage = &resp.Usage
		s.send("", u)
	}
	s.done()
	g.endStream(c, s)
}

// responseEvent is one event of a streamed response; which members it has depends on its type.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	Item           any             `json:"item,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	SummaryIndex   *int            `json:"summary_index,omitempty"`
	Part           any             `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Name           string          `json:"name,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Logprobs       *[]any          `json:"logprobs,omitempty"`
}

// event sends one Responses event, numbering it.
func (s *sseWriter) event(e responseEvent) {
	e.SequenceNumber = s.seq
	s.seq++
	s.send(e.Type, e)
}

// addedItem is an output item as response.output_item.added shows it: in progress, without
// its text yet.
type addedItem struct {
	ID        string  `json:"id"`
	Type      string  `json:"type"`
	Status    string  `json:"status"`
	Role      string  `json:"role,omitempty"`
	Content   *[]any  `json:"content,omitempty"`
	Summary   *[]any  `json:"summary,omitempty"`
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	Arguments *string `json:"arguments,omitempty"`
}

// streamResponse writes a response as the Responses API streams one: response.created and
// response.in_progress, each output item's events (its text or arguments in one delta, since
// the Responses path does not fetch token pieces), and response.completed with the whole
// response.
func (g *Gateway) streamResponse(w http.ResponseWriter, c *call, resp *responseObject) {
	s := startStream(w, c)
	pending := *resp
	pending.Status, pending.IncompleteDetails, pending.Output = "in_progress", nil, []outputItem{}
	pending.Usage = responsesUsage{}
	s.event(responseEvent{Type: "response.created", Response: &pending})
	s.event(responseEvent{Type: "response.in_progress", Response: &pending})
	noLogprobs := &[]any{}
	for k := range resp.Output {
		it := &resp.Output[k]
		at := &k // a variable of this iteration
		added := addedItem{ID: it.ID, Type: it.Type, Status: "in_progress", Role: it.Role, CallID: it.CallID, Name: it.Name}
		switch it.Type {
		case "reasoning":
			added.Summary = &[]any{}
			s.event(responseEvent{Type: "response.output_item.added", OutputIndex: at, Item: added})
			for j, sum := range it.Summary {
				s.event(responseEvent{Type: "response.reasoning_summary_part.added", ItemID: it.ID, OutputIndex: at, SummaryIndex: &j,
					Part: summaryText{Type: sum.Type}})
				s.event(responseEvent{Type: "response.reasoning_summary_text.delta", ItemID: it.ID, OutputIndex: at, SummaryIndex: &j, Delta: &sum.Text})
				s.event(responseEvent{Type: "response.reasoning_summary_text.done", ItemID: it.ID, OutputIndex: at, SummaryIndex: &j, Text: &sum.Text})
				s.event(responseEvent{Type: "response.reasoning_summary_part.done", ItemID: it.ID, OutputIndex: at, SummaryIndex: &j, Part: sum})
			}
		case "message":
			added.Content = &[]any{}
			s.event(responseEvent{Type: "response.output_item.added", OutputIndex: at, Item: added})
			for j, part := range it.Content {
				s.event(responseEvent{Type: "response.content_part.added", ItemID: it.ID, OutputIndex: at, ContentIndex: &j,
					Part: outputText{Type: part.Type, Annotations: []any{}}})
				s.event(responseEvent{Type: "response.output_text.delta", ItemID: it.ID, OutputIndex: at, ContentIndex: &j, Delta: &part.Text, Logprobs: noLogprobs})
				s.event(responseEvent{Type: "response.output_text.done", ItemID: it.ID, OutputIndex: at, ContentIndex: &j, Text: &part.Text, Logprobs: noLogprobs})
				s.event(responseEvent{Type: "response.content_part.done", ItemID: it.ID, OutputIndex: at, ContentIndex: &j, Part: part})
			}
		case "function_call":
			added.Arguments = new(string)
			s.event(responseEvent{Type: "response.output_item.added", OutputIndex: at, Item: added})
			s.event(responseEvent{Type: "response.function_call_arguments.delta", ItemID: it.ID, OutputIndex: at, Delta: it.Arguments})
			s.event(responseEvent{Type: "response.function_call_arguments.done", ItemID: it.ID, OutputIndex: at, Name: it.Name, Arguments: it.Arguments})
		}
		s.event(responseEvent{Type: "response.output_item.done", OutputIndex: at, Item: it})
	}
	end := "response.completed"
	if resp.Status == "incomplete" {
		end = "response.incomplete"
	}
	s.event(responseEvent{Type: end, Response: resp})
	g.endStream(c, s)
}
