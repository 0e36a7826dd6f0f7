package env

import (
	"context"
	"slices"
	"time"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/internal/tokcache"
	"github.com/rollfleet/rollfleet/messages"
)

// firstPrompt builds and tokenizes the first prompt of a chat-style episode.
// The request's own messages or prompt win over the env's instructions,
// except for a task env, whose instructions already hold the request's
// prompt; an env's own first prompt is envs.Spec.FirstChat. Messages are
// rendered by the model's own chat template on the model server, with the
// request's template variables, or by rollfleet's ChatML when the request
// names it.
func (e *episode) firstPrompt(ctx context.Context, obs string, info envs.Info) error {
	req := e.req
	var msgs []messages.ChatMessage
	switch {
	case len(req.Messages) > 0:
		msgs = req.Messages
	case req.Prompt != "" && !e.spec.Task && req.ChatTemplate:
		msgs = []messages.ChatMessage{{Role: "user", Content: req.Prompt}}
	case req.Prompt != "" && !e.spec.Task:
	default:
		system, user := e.spec.FirstChat(obs, info)
		if system != "" {
			msgs = append(msgs, messages.ChatMessage{Role: "system", Content: system})
		}
		msgs = append(msgs, messages.ChatMessage{Role: "user", Content: user})
	}
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID, Text: req.Prompt}
	var t *templated
	if len(msgs) > 0 {
		t = &templated{render: func(content []string) *messages.TokenizeRequest {
			ms := rendered(msgs, content)
			r := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID}
			if req.ChatTemplateName == messages.TemplateChatML {
				r.Text = chat.Render(chatML(ms), true)
			} else {
				r.Messages, r.AddGenerationPrompt, r.ChatTemplateKwargs = ms, true, req.ChatTemplateKwargs
			}
			return r
		}}
		for _, m := range msgs {
			t.content = append(t.content, m.Content)
		}
		treq = t.render(t.content)
	}
	toks, err := e.tokenize(ctx, treq, true)
	if err != nil {
		return err
	}
	toks, e.promptCut, err = e.fitPrompt(ctx, toks, t)
	if err != nil {
		return err
	}
	if t != nil {
		e.promptMessages = rendered(msgs, t.content) // what was rendered: roles and the content kept
	}
	// Room for a few turns; append grows it from there as the episode does.
	e.tokens = make([]int32, len(toks), len(toks)+512)
	copy(e.tokens, toks)
	return nil
}

// rendered is msgs as the first prompt renders them: their roles, with
// content in place of theirs.
func rendered(msgs []messages.ChatMessage, content []string) []messages.ChatMessage {
	out := make([]messages.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = messages.ChatMessage{Role: m.Role, Content: content[i]}
	}
	return out
}

// chatML converts messages for chat.Render.
func chatML(ms []messages.ChatMessage) []chat.Message {
	out := make([]chat.Message, len(ms))
	for i, m := range ms {
		out[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return out
}

// feedbackTokens tokenizes the env's answer to an action as the user turn
// that follows it: the chat template's tokens from the end of the model's
// turn through the user message to the next generation prompt (or, when
// done, to the end of the conversation). Those tokens begin with the
// template's end-of-turn token, which is left out when the model sampled
// that very token to end its action: the action keeps it as sampled, with
// its logprob. An action that stopped otherwise (the length limit, a stop
// string, another stop token such as Qwen3's <|endoftext|>) is closed by the
// template's own end-of-turn token.
func (e *episode) feedbackTokens(ctx context.Context, action *messages.GenerateReply, content string, done bool) ([]int32, error) {
	req := e.req
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: req.EpisodeID}
	if req.ChatTemplateName == messages.TemplateChatML {
		treq.Text = chat.Turn(content, done)
	} else {
		treq.Text, treq.Turn, treq.ChatTemplateKwargs = content, messages.TurnNext, req.ChatTemplateKwargs
		if done {
			treq.Turn = messages.TurnFinal
		}
	}
	toks, err := e.tokenize(ctx, treq, true)
	if err != nil {
		return nil, err
	}
	if n := len(action.Tokens); action.EndOfTurn && n > 0 && len(toks) > 0 && action.Tokens[n-1] == toks[0] {
		toks = toks[1:]
	}
	return toks, nil
}

// singleTurnPrompt builds and tokenizes this turn's fresh prompt in a
// single-turn style: the observation history plus the current suffix, as
// GEM's concat wrapper does, wrapped in the qwen3_game template if asked.
func (e *episode) singleTurnPrompt(ctx context.Context) error {
	text := chat.History(e.history, e.suffix)
	treq := &messages.TokenizeRequest{V: messages.Version, EpisodeID: e.req.EpisodeID, Text: text}
	var t *templated
	if e.req.ObsStyle == messages.ObsQwen3Game {
		t = &templated{content: []string{text}, render: func(content []string) *messages.TokenizeRequest {
			return &messages.TokenizeRequest{V: messages.Version, EpisodeID: e.req.EpisodeID, Text: chat.Qwen3Game(content[0])}
		}}
		treq = t.render(t.content)
	}
	toks, err := e.tokenize(ctx, treq, len(e.history) <= 1)
	if err != nil {
		return err
	}
	e.tokens, e.promptCut, err = e.fitPrompt(ctx, toks, t)
	return err
}

// tokenize tokenizes through the LLM workers, or, with cache, from the
// worker's cache for a short plain text: the fleet serves one model, whose
// tokenizer is a pure function of the text, and feedback and first prompts
// repeat, so most feedback turns cross NATS only to generate. Texts made
// once (a later turn's single-turn history prompt, a trimming probe) are
// not cached, so they do not push out those that repeat. The returned
// slice may be shared: its capacity is its length, so an append copies it.
func (e *episode) tokenize(ctx context.Context, treq *messages.TokenizeRequest, cache bool) ([]int32, error) {
	t0 := time.Now()
	cacheable := cache && len(treq.Messages) == 0 && tokcache.Cacheable(treq.Text)
	key := tokcache.KeyOf(treq)
	if cacheable {
		if ids, ok := e.w.tokens.Get(key); ok {
			e.tm.Tokenize += time.Since(t0).Nanoseconds()
			return ids, nil
		}
	}
	rep, err := request[messages.TokenizeReply](ctx, e.w, e.w.opts.Subjects.Tokenize(), treq, e.traceparent,
		func(r *messages.TokenizeReply) string { return r.Code })
	e.tm.Tokenize += time.Since(t0).Nanoseconds()
	if err != nil {
		return nil, err
	}
	if rep.Error != "" {
		return nil, e.fail("tokenize (%s): %s", rep.Code, rep.Error)
	}
	ids := slices.Clip([]int32(rep.Tokens))
	if cacheable {
		e.w.tokens.Put(key, ids)
	}
	return ids, nil
}
