package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rollfleet/rollfleet/messages"
)

// Agent frameworks send a conversation back re-serialized: tool-call arguments through
// JSON.stringify, content as text parts, names added, text with invalid UTF-8 as U+FFFD.
// Each re-renders to other tokens than the model sampled. A session therefore remembers its
// current segment's last chat call (the messages as rendered and the reply as the gateway
// returned it), and a call whose messages repeat them with the same meaning gets the
// remembered originals back before rendering (see restore).

// lastCall is what a segment remembers of its last chat call.
type lastCall struct {
	msgs  []messages.ChatMessage // the messages as rendered
	reply messages.ChatMessage   // the assistant message the gateway returned
	// endOfTurn is the reply's GenerateReply.EndOfTurn: its last token closed the turn.
	endOfTurn bool
	// hash is the hash of msgs and reply (conversationHashes).
	hash uint64
	// settings is the hash of what else shaped the rendering (templateSettings): a call with
	// other tools or template variables renders anew, never from the remembered call.
	settings uint64
}

// templateSettings hashes what besides the messages shapes a chat rendering: the tools, the
// template variables and the rendering flags.
func templateSettings(req *messages.ChatTokenizeRequest) uint64 {
	h := fnv.New64a()
	h.Write(req.Tools)
	h.Write([]byte{0})
	h.Write(req.ChatTemplateKwargs)
	h.Write([]byte{0, boolByte(req.AddSpecialTokens), boolByte(req.AddGenerationPrompt), boolByte(req.ContinueFinalMessage)})
	return h.Sum64()
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// newLastCall remembers a chat call: the messages it rendered, the reply the gateway
// returned, whether the reply closed its turn itself. The hash is computed here, by the
// session's lease holder, rather than under the store's lock when the session is indexed.
func newLastCall(msgs []messages.ChatMessage, out *chatOut, endOfTurn bool, settings uint64) *lastCall {
	lc := &lastCall{msgs: msgs, reply: replyMessage(out), endOfTurn: endOfTurn, settings: settings}
	lc.hash = conversationHashes(append(slices.Clip(msgs), lc.reply))[len(msgs)]
	return lc
}

// replyMessage is a chat reply as the assistant message a client sends back.
func replyMessage(out *chatOut) messages.ChatMessage {
	m := messages.ChatMessage{Role: "assistant"}
	if out.Content != nil {
		m.Content = *out.Content
	}
	if out.ReasoningContent != nil {
		m.Reasoning = *out.ReasoningContent
	}
	if len(out.ToolCalls) > 0 {
		m.ToolCalls, _ = json.Marshal(out.ToolCalls) // plain strings: cannot fail
	}
	return m
}

// restore matches msgs against the last call: when they begin with its messages and then its
// reply, each with the same meaning (see sameMessage), it returns msgs with those replaced by
// the originals, tool messages answering a call whose id the client rewrote given the
// original id, and the number of messages replaced; else msgs and 0.
func (lc *lastCall) restore(msgs []messages.ChatMessage) ([]messages.ChatMessage, int) {
	k := len(lc.msgs)
	if len(msgs) <= k {
		return msgs, 0
	}
	ids := map[string]string{}
	for i, m := range lc.msgs {
		if !sameMessage(msgs[i], m, ids) {
			return msgs, 0
		}
	}
	if !sameMessage(msgs[k], lc.reply, ids) {
		return msgs, 0
	}
	out := slices.Concat(lc.msgs, []messages.ChatMessage{lc.reply}, msgs[k+1:])
	for i := k + 1; i < len(out); i++ {
		if orig, ok := ids[out[i].ToolCallID]; ok && out[i].ToolCallID != "" {
			out[i].ToolCallID = orig
		}
	}
	return out, k + 1
}

// sameMessage reports whether a message a client sent means the same as the original: the
// same role; content equal as text (text parts are joined when decoded) or equal once runs
// of U+FFFD are matched against the original's runs of invalid UTF-8; reasoning equal or
// absent (clients drop it); tool calls equal (see sameToolCalls); the same tool_call_id once
// the client's rewritten call ids are mapped back. Names are ignored: the original's are
// what the model saw. ids gains the client's call ids that differ from the original's.
func sameMessage(client, orig messages.ChatMessage, ids map[string]string) bool {
	switch {
	case client.Role != orig.Role,
		!sameText(client.Content, orig.Content),
		client.Reasoning != "" && !sameText(client.Reasoning, orig.Reasoning),
		client.ToolCallID != orig.ToolCallID && (ids[client.ToolCallID] != orig.ToolCallID || client.ToolCallID == ""):
		return false
	}
	return sameToolCalls(client.ToolCalls, orig.ToolCalls, ids)
}

// sameText reports whether a client's text is the original's: equal, or equal after each run
// of U+FFFD and invalid UTF-8 bytes in either is taken as one unreadable run, since a client
// decodes invalid bytes into replacement characters by rules of its own (one per byte, or
// one per maximal subpart).
func sameText(client, orig string) bool {
	return client == orig || unreadableRuns(client) == unreadableRuns(orig)
}

// unreadableRuns is s with every run of U+FFFD and invalid bytes replaced by one U+FFFD.
func unreadableRuns(s string) string {
	if !strings.ContainsRune(s, utf8.RuneError) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	inRun := false
	for _, r := range s { // an invalid byte reads as utf8.RuneError
		if r == utf8.RuneError {
			if !inRun {
				b.WriteRune(r)
			}
			inRun = true
			continue
		}
		inRun = false
		b.WriteRune(r)
	}
	return b.String()
}

// toolCall is a tool call as a client sends it back; Arguments may be the arguments' JSON
// text (the API's form) or, from some clients, the JSON value itself.
type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// sameToolCalls reports whether a client's tool calls are the original's: as many, in order,
// each calling the same function with arguments equal as JSON values (whatever the
// whitespace, key order or number spelling). Call ids may differ: a client that rewrites them
// answers them by its own ids, which ids maps to the original's.
func sameToolCalls(client, orig json.RawMessage, ids map[string]string) bool {
	if len(client) == 0 || len(orig) == 0 {
		return len(client) == len(orig)
	}
	var cs, os []toolCall
	if json.Unmarshal(client, &cs) != nil || json.Unmarshal(orig, &os) != nil || len(cs) != len(os) {
		return false
	}
	found := map[string]string{}
	for i, c := range cs {
		o := os[i]
		if c.Function.Name != o.Function.Name || !sameArguments(c.Function.Arguments, o.Function.Arguments) {
			return false
		}
		if c.ID != o.ID && c.ID != "" {
			found[c.ID] = o.ID
		}
	}
	maps.Copy(ids, found)
	return true
}

// sameArguments compares two tool calls' arguments as JSON values; arguments that are not
// JSON are compared as text.
func sameArguments(a, b json.RawMessage) bool {
	ta, tb := argumentsText(a), argumentsText(b)
	if ta == tb {
		return true
	}
	va, oka := parseJSON(ta)
	vb, okb := parseJSON(tb)
	return oka && okb && sameJSON(va, vb)
}

// argumentsText is a tool call's arguments as JSON text: the string's content when they are
// a JSON string, else their own text.
func argumentsText(raw json.RawMessage) string {
	var s string
	if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// parseJSON parses one JSON value, numbers as json.Number.
func parseJSON(text string) (any, bool) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil, false
	}
	return v, true
}

// sameJSON reports whether two parsed JSON values are equal: objects whatever their key
// order, numbers by value.
func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			if vb, ok := b[k]; !ok || !sameJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		return ok && slices.EqualFunc(a, b, sameJSON)
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		fa, errA := strconv.ParseFloat(string(a), 64)
		fb, errB := strconv.ParseFloat(string(b), 64)
		return errA == nil && errB == nil && fa == fb
	default:
		return a == b
	}
}

// conversationHashes hashes msgs by what sameMessage compares, so that messages meaning the
// same hash alike: for each assistant message msgs[n], the hash of msgs[:n+1], keyed by n.
func conversationHashes(msgs []messages.ChatMessage) map[int]uint64 {
	h := fnv.New64a()
	out := map[int]uint64{}
	for n, m := range msgs {
		writeMessageKey(h, m)
		if m.Role == "assistant" {
			out[n] = h.Sum64()
		}
	}
	return out
}

// writeMessageKey writes what sameMessage compares of m, except what may differ between
// messages meaning the same: reasoning (clients drop it), call ids and names.
func writeMessageKey(h hash.Hash64, m messages.ChatMessage) {
	var b []byte
	b = append(append(b, m.Role...), 0)
	b = append(append(b, unreadableRuns(m.Content)...), 0)
	var calls []toolCall
	if json.Unmarshal(m.ToolCalls, &calls) == nil {
		for _, c := range calls {
			b = append(append(b, c.Function.Name...), 0)
			text := argumentsText(c.Function.Arguments)
			if v, ok := parseJSON(text); ok {
				b = appendCanonicalJSON(b, v)
			} else {
				b = append(b, text...)
			}
			b = append(b, 0)
		}
	}
	h.Write(append(b, 1))
}

// appendCanonicalJSON appends a parsed JSON value in one spelling of all that sameJSON finds
// equal: object keys sorted, numbers by value.
func appendCanonicalJSON(b []byte, v any) []byte {
	switch v := v.(type) {
	case map[string]any:
		b = append(b, '{')
		for i, k := range slices.Sorted(maps.Keys(v)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k)
			b = appendCanonicalJSON(append(b, ':'), v[k])
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonicalJSON(b, e)
		}
		return append(b, ']')
	case json.Number:
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return strconv.AppendFloat(b, f, 'g', -1, 64)
		}
		return append(b, v...)
	case string:
		return strconv.AppendQuote(b, v)
	default: // bool or nil
		return fmt.Append(b, v)
	}
}

// chatPrompt renders and tokenizes a chat call's messages and returns the prompt and the
// messages rendered. A call without a session id takes the session whose last call and
// reply its messages repeat, if any (store.byConversation). Messages repeating the session's
// last call and its reply are first replaced by the originals (lastCall.restore). When they were, and still render to a prompt
// that does not extend the trace (a template that drops earlier turns' reasoning, or text
// that does not tokenize back to what was sampled), the prompt is the trace followed by the
// template's tokens for the messages after the reply, unless Options.NoContinueTrace: the
// model then sees its earlier turns exactly as sampled.
func (g *Gateway) chatPrompt(ctx context.Context, c *call, req *messages.ChatTokenizeRequest) ([]int32, []messages.ChatMessage, error) {
	var seg *segment
	n := 0
	if c.idless {
		// A call without an id finds its session by its conversation, before rendering.
		if l := g.sessions.byConversation(c.scope, req.Messages); l != nil {
			c.lease, c.key, c.idless = l, l.s.id, false
			req.EpisodeID = c.key
		}
	}
	c.settings = templateSettings(req)
	if c.lease != nil {
		if seg = c.lease.current(); seg != nil && seg.last != nil && seg.last.settings == c.settings {
			req.Messages, n = seg.last.restore(req.Messages)
		}
	}
	prompt, err := g.tokenize(ctx, req, "")
	if err != nil || n == 0 || n == len(req.Messages) || g.opts.NoContinueTrace || extends(prompt, seg.tokens) {
		return prompt, req.Messages, err
	}
	after := *req
	after.Messages, after.AfterAssistant = req.Messages[n:], true
	tail, err := g.tokenize(ctx, &after, "")
	if err != nil {
		// The template's turn could not be isolated: the call starts a new segment instead.
		g.log.Warn("session messages extend its last call but cannot continue its trace", "session", c.key, "err", err)
		return prompt, req.Messages, nil
	}
	if !slices.Equal(prompt[max(len(prompt)-len(tail), 0):], tail) {
		// The new messages render otherwise after the real conversation than after the
		// probe's: continuing would guess, so the call starts a new segment instead.
		return prompt, req.Messages, nil
	}
	trace := seg.tokens
	// The reply's own end-of-turn token stays, as sampled, in place of the template's.
	if seg.last.endOfTurn && len(trace) > 0 && len(tail) > 0 && trace[len(trace)-1] == tail[0] {
		tail = tail[1:]
	}
	return slices.Concat(trace, tail), req.Messages, nil
}
