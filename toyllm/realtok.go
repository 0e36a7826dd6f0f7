package toyllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rollfleet/rollfleet/chat"
	"github.com/rollfleet/rollfleet/chat/hftemplate"
	"github.com/rollfleet/rollfleet/internal/jsonw"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
	"github.com/rollfleet/rollfleet/tokenizer"
)

// ModelTokenizer is a real model's tokenizer and chat template, which a
// Server given one in Options.Tokenizer speaks instead of the byte-level
// toy vocabulary, so that clients see the token ids, special tokens and
// prompt layout of the model they will train. It is safe for concurrent
// use.
type ModelTokenizer struct {
	tok  *tokenizer.Tokenizer
	tmpl *hftemplate.Template // nil when the model has no chat template
	eos  int32                // the config's eos_token; -1 when it names none
	// endOfTurn is the token the template writes after an assistant
	// message: the token every planned reply ends with.
	endOfTurn int32
	// stopIDs are the stop tokens besides eos, as vLLM adds them: the
	// end-of-turn token when it is another, and the other eos_token_id
	// entries of generation_config.json.
	stopIDs []int32
	// endSlip is what the end-of-turn token slips to: eos when it is
	// another token, else the first other stop token; -1 for none.
	endSlip int32
	// regular are the ids of the tokens that are not special, ascending:
	// the tokens a slip inside the text may go to.
	regular []int32
	view    chatView
	// thinks reports a thinking template, one that leaves opening the
	// reasoning block to the model unless asked not to think (Qwen3's
	// enable_thinking): see Options.Reasoning.
	thinks bool
}

// noTemplateMessage is vLLM's answer to a chat request for a model whose
// tokenizer has no chat template and that was started without one.
const noTemplateMessage = "As of transformers v4.44, default chat template is no longer allowed, " +
	"so you must provide a chat template if the tokenizer does not define one."

// LoadModelTokenizer loads the tokenizer of a model directory (its
// tokenizer.json and tokenizer_config.json, and generation_config.json when
// present) and its chat template: chatTemplateFile when not empty (as vLLM's
// --chat-template), else chat_template.jinja beside the config or the
// config's chat_template. A model without a chat template loads, and answers
// chat requests with vLLM's error.
func LoadModelTokenizer(dir, chatTemplateFile string) (*ModelTokenizer, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("toyllm: %w", err)
	}
	var tmpl *hftemplate.Template
	if chatTemplateFile != "" {
		src, err := os.ReadFile(chatTemplateFile)
		if err != nil {
			return nil, fmt.Errorf("toyllm: chat template: %w", err)
		}
		if tmpl, err = templateFrom(tok, string(src)); err != nil {
			return nil, fmt.Errorf("toyllm: chat template %s: %w", chatTemplateFile, err)
		}
	} else if tmpl, err = hftemplate.Load(filepath.Join(dir, "tokenizer_config.json")); errors.Is(err, hftemplate.ErrNoTemplate) {
		tmpl = nil
	} else if err != nil {
		return nil, fmt.Errorf("toyllm: chat template: %w", err)
	}
	genEOS, err := generationEOS(dir)
	if err != nil {
		return nil, err
	}
	mt, err := newModelTokenizer(tok, tmpl, genEOS)
	if err != nil {
		return nil, fmt.Errorf("toyllm: tokenizer %s: %w", dir, err)
	}
	return mt, nil
}

// templateFrom compiles a chat template's source with the special tokens
// of tok's config.
func templateFrom(tok *tokenizer.Tokenizer, src string) (*hftemplate.Template, error) {
	cfg := maps.Clone(tok.Config())
	cfg["chat_template"] = src
	return hftemplate.FromConfig(cfg)
}

// newModelTokenizer learns what the stand-in needs of a tokenizer, its chat
// template (nil for none) and its generation config's eos ids.
func newModelTokenizer(tok *tokenizer.Tokenizer, tmpl *hftemplate.Template, genEOS []int32) (*ModelTokenizer, error) {
	mt := &ModelTokenizer{tok: tok, tmpl: tmpl, eos: -1, endSlip: -1}
	if id, ok := tok.EOS(); ok {
		mt.eos = id
	}
	mt.endOfTurn = mt.eos
	if tmpl != nil {
		var err error
		if mt.endOfTurn, err = mt.learnEndOfTurn(); err != nil {
			return nil, err
		}
		if mt.view, err = learnView(tmpl, tok, mt.endOfTurn); err != nil {
			return nil, err
		}
		mt.thinks = learnThinks(tmpl)
	}
	if mt.endOfTurn < 0 {
		return nil, errors.New("no eos_token and no chat template to end a reply with")
	}
	for _, id := range append([]int32{mt.endOfTurn}, genEOS...) {
		if id != mt.eos && !slices.Contains(mt.stopIDs, id) {
			mt.stopIDs = append(mt.stopIDs, id)
		}
	}
	switch {
	case mt.eos >= 0 && mt.eos != mt.endOfTurn:
		mt.endSlip = mt.eos
	default:
		for _, id := range mt.stopIDs {
			if id != mt.endOfTurn {
				mt.endSlip = id
				break
			}
		}
	}
	special := tok.SpecialIDs()
	for id := range int32(tok.VocabSize()) {
		if _, ok := tok.Token(id); ok {
			if _, isSpecial := slices.BinarySearch(special, id); !isSpecial {
				mt.regular = append(mt.regular, id)
			}
		}
	}
	return mt, nil
}

// generationEOS reads the eos_token_id of dir/generation_config.json (a
// number or a list), which vLLM adds to the stop tokens; none when the file
// is absent.
func generationEOS(dir string) ([]int32, error) {
	b, err := os.ReadFile(filepath.Join(dir, "generation_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("toyllm: %w", err)
	}
	var cfg struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("toyllm: generation_config.json: %w", err)
	}
	if len(cfg.EOS) == 0 || string(cfg.EOS) == "null" {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(cfg.EOS, &one); err == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(cfg.EOS, &many); err != nil {
		return nil, fmt.Errorf("toyllm: generation_config.json eos_token_id: %w", err)
	}
	return many, nil
}

// EndOfTurn returns the token that ends every reply: the one the chat
// template writes right after an assistant message's content (the eos
// token for a model without a template).
func (mt *ModelTokenizer) EndOfTurn() int32 { return mt.endOfTurn }

// Tokenizer returns the model's tokenizer.
func (mt *ModelTokenizer) Tokenizer() *tokenizer.Tokenizer { return mt.tok }

// probe returns a sentinel message content for the template probes: text
// no template changes and no conversation contains.
func probe(name string) string { return "rollfleetprobe" + name + "x" }

// learnEndOfTurn renders a finished exchange and returns the first token
// after the assistant's content.
func (mt *ModelTokenizer) learnEndOfTurn() (int32, error) {
	a := probe("A")
	text, err := mt.tmpl.Render([]hftemplate.Message{
		{Role: "user", Content: hftemplate.Text(probe("U"))},
		{Role: "assistant", Content: hftemplate.Text(a)},
	}, hftemplate.RenderOptions{})
	if err != nil {
		return 0, fmt.Errorf("chat template probe: %w", err)
	}
	i := strings.LastIndex(text, a)
	if i < 0 {
		return 0, errors.New("chat template probe: the assistant's content is not in the rendered text")
	}
	if ids := mt.tok.Encode(text[i+len(a):], false); len(ids) > 0 {
		return ids[0], nil
	}
	return mt.eos, nil
}

// learnThinks reports whether a template is a thinking one: rendering a
// user message's generation prompt with enable_thinking off adds a closed
// reasoning block at the end, which the model opens and closes itself when
// thinking is on. A template failing either probe is not one, so that the
// probe never stops a template from loading.
func learnThinks(tmpl *hftemplate.Template) bool {
	msgs := []hftemplate.Message{{Role: "user", Content: hftemplate.Text(probe("U"))}}
	on, err := tmpl.Render(msgs, hftemplate.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		return false
	}
	off, err := tmpl.Render(msgs, hftemplate.RenderOptions{AddGenerationPrompt: true,
		Kwargs: map[string]any{"enable_thinking": false}})
	if err != nil {
		return false
	}
	block, ok := strings.CutPrefix(off, on)
	block = strings.TrimSpace(block)
	return ok && strings.HasPrefix(block, thinkStart) && strings.HasSuffix(block, thinkEnd)
}

// chatView translates a prompt rendered by the model's chat template into
// the ChatML layout the planners read (see template.go): the separators
// between turns, learned from the template at load, are replaced by
// ChatML's. Turns the probes did not cover (system, tool) stay inside the
// turn around them, which the planners tolerate, since they look at the
// user turns, the generation prompt and phrases anywhere in the text.
type chatView struct {
	identity bool   // the template is ChatML already (Qwen)
	userOpen string // opens the first user turn
	toAsst   string // ends a user turn and opens an assistant turn
	toUser   string // ends an assistant turn and opens a user turn
	genTail  string // ends the last user turn and opens the reply
}

// ChatML's separators, which the view writes.
const (
	chatMLUserOpen = chat.ImStart + "user\n"
	chatMLToAsst   = chat.ImEnd + "\n" + chat.ImStart + "assistant\n"
	chatMLToUser   = chat.ImEnd + "\n" + chat.ImStart + "user\n"
)

// learnView renders [user, assistant, user] with a generation prompt, with
// sentinel contents, and reads the separators around them.
func learnView(tmpl *hftemplate.Template, tok *tokenizer.Tokenizer, endOfTurn int32) (chatView, error) {
	u1, a1, u2 := probe("U1"), probe("A1"), probe("U2")
	text, err := tmpl.Render([]hftemplate.Message{
		{Role: "user", Content: hftemplate.Text(u1)},
		{Role: "assistant", Content: hftemplate.Text(a1)},
		{Role: "user", Content: hftemplate.Text(u2)},
	}, hftemplate.RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		return chatView{}, fmt.Errorf("chat template probe: %w", err)
	}
	i1, i2, i3 := strings.Index(text, u1), strings.Index(text, a1), strings.Index(text, u2)
	if i1 < 0 || i2 < i1 || i3 < i2 {
		return chatView{}, errors.New("chat template probe: the messages are not in the rendered text in order")
	}
	head := text[:i1]
	v := chatView{
		toAsst:  text[i1+len(u1) : i2],
		toUser:  text[i2+len(a1) : i3],
		genTail: text[i3+len(u2):],
	}
	// The first user turn opens as the others do after the assistant's
	// end-of-turn token; what comes before it is the template's preamble
	// (BOS, a default system turn).
	open := v.toUser
	if eot, ok := tok.Token(endOfTurn); ok {
		open = strings.TrimPrefix(open, eot)
	}
	n := 0
	for n < len(head) && n < len(open) && head[len(head)-1-n] == open[len(open)-1-n] {
		n++
	}
	v.userOpen = head[len(head)-n:]
	v.identity = head == chatMLUserOpen && v.toAsst == chatMLToAsst && v.toUser == chatMLToUser &&
		strings.HasPrefix(v.genTail, chatMLToAsst)
	return v, nil
}

// appendView appends the ChatML view of text, a decoded prompt, to dst.
// Text without the template's layout is appended as it is.
func (v *chatView) appendView(dst []byte, text string) []byte {
	i := strings.Index(text, v.userOpen)
	if v.identity || v.userOpen == "" || i < 0 {
		return append(dst, text...)
	}
	body := text[i+len(v.userOpen):]
	// A thinking generation prompt (a template kwarg) opens a reasoning
	// block after the usual one: the view keeps it open.
	think, reply := false, false
	if b, ok := strings.CutSuffix(body, thinkOpen); ok {
		if c, ok := strings.CutSuffix(b, v.genTail); ok {
			body, think, reply = c, true, true
		}
	}
	if !reply {
		body, reply = strings.CutSuffix(body, v.genTail)
	}
	if i > 0 {
		dst = append(dst, chat.ImStart+"system\n"...)
		dst = append(dst, text[:i]...)
		dst = append(dst, chat.ImEnd+"\n"...)
	}
	dst = append(dst, chatMLUserOpen...)
	for body != "" {
		a, u := strings.Index(body, v.toAsst), strings.Index(body, v.toUser)
		k, sep, chatSep := a, v.toAsst, chatMLToAsst
		if u >= 0 && (a < 0 || u < a) {
			k, sep, chatSep = u, v.toUser, chatMLToUser
		}
		if k < 0 || sep == "" {
			dst = append(dst, body...)
			break
		}
		dst = append(append(dst, body[:k]...), chatSep...)
		body = body[k+len(sep):]
	}
	if reply {
		dst = append(dst, chatMLToAsst...)
		if think {
			dst = append(dst, thinkOpen...)
		}
	}
	return dst
}

// render renders a chat request's messages with the model's chat template,
// as vLLM does: continue_final_message renders without a generation prompt
// and cuts the text after the last message's content.
func (mt *ModelTokenizer) render(f *chatTemplateFields) (string, error) {
	if mt.tmpl == nil {
		return "", vllmapi.BadRequest(noTemplateMessage)
	}
	addGen := f.AddGenerationPrompt == nil || *f.AddGenerationPrompt
	switch {
	case len(f.Messages) == 0:
		return "", vllmapi.BadRequest("messages must not be empty")
	case addGen && f.ContinueFinalMessage:
		return "", vllmapi.BadRequest("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	msgs := make([]hftemplate.Message, len(f.Messages))
	for i := range f.Messages {
		m := &f.Messages[i]
		if m.Role == "" {
			return "", vllmapi.BadRequest("messages[%d]: role is required", i)
		}
		// A null content (an assistant turn of tool calls) reaches the
		// template as "", as vLLM joins a message's text parts.
		hm := hftemplate.Message{Role: m.Role, ToolCallID: m.ToolCallID, Content: hftemplate.Text(m.Content)}
		if m.Reasoning != "" {
			hm.ReasoningContent = &m.Reasoning
		}
		for _, c := range m.toolCalls {
			hm.ToolCalls = append(hm.ToolCalls, hftemplate.ToolCall{ID: c.ID, Type: c.Type,
				Function: hftemplate.FunctionCall{Name: c.Function.Name, Arguments: c.Function.Arguments}})
		}
		msgs[i] = hm
	}
	ro := hftemplate.RenderOptions{AddGenerationPrompt: addGen}
	var err error
	if ro.Tools, err = rawJSONList("tools", f.Tools); err != nil {
		return "", err
	}
	if ro.Documents, err = rawJSONList("documents", f.Documents); err != nil {
		return "", err
	}
	if k := bytes.TrimSpace(f.ChatTemplateKwargs); len(k) > 0 && string(k) != "null" {
		if err := json.Unmarshal(k, &ro.Kwargs); err != nil {
			return "", vllmapi.BadRequest("chat_template_kwargs: %v", err)
		}
	}
	text, err := mt.tmpl.Render(msgs, ro)
	if err != nil {
		return "", vllmapi.BadRequest("%w", err)
	}
	if f.ContinueFinalMessage {
		// As transformers does: cut after the final content, stripped of
		// surrounding white space when the template stripped it.
		last := f.Messages[len(f.Messages)-1].Content
		i := strings.LastIndex(text, last)
		if i < 0 {
			last = strings.TrimSpace(last)
			if i = strings.LastIndex(text, last); i < 0 {
				return "", vllmapi.BadRequest("continue_final_message is set but the final message does not appear in the chat after applying the chat template.")
			}
		}
		text = text[:i+len(last)]
	}
	return text, nil
}

// rawJSONList splits a JSON list of a request field into its items; null or
// absent is nil.
func rawJSONList(field string, raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, vllmapi.BadRequest("%s must be a list: %v", field, err)
	}
	return items, nil
}

// appendPromptView appends the ChatML view of a prompt's decoded text, what
// the planners read.
func (mt *ModelTokenizer) appendPromptView(dst []byte, prompt []int32) []byte {
	return mt.view.appendView(dst, mt.tok.Decode(prompt, false))
}

// appendPlan appends the tokens of a planned reply's text.
func (mt *ModelTokenizer) appendPlan(dst []int32, planText []byte) []int32 {
	return append(dst, mt.tok.Encode(string(planText), false)...)
}

// Step kinds of the tokenizer mode, indexes of its policyTable: the logits
// depend only on whether the planned token is a regular one and whether it
// is the end of turn with a slip.
const (
	stepText    = iota // the planned token is regular: the rest are the other regular tokens
	stepSpecial        // a special planned token without slips: the rest are all regular tokens
	stepEnd            // the end of turn and its slip: the rest are all regular tokens
)

// restMass is the total weight (sum of exp(logit)) of the tokens other
// than the planned one at a byte-vocabulary step with one plausible slip.
// The regular tokens of a real vocabulary share it, so that the policy
// slips about as often per token as in the byte mode whatever the
// vocabulary's size.
var restMass = float64(VocabSize-2) + math.Exp(slipLogit)

// stepKind returns the step kind of a planned token.
func (mt *ModelTokenizer) stepKind(planned int32) int {
	switch {
	case planned == mt.endOfTurn && mt.endSlip >= 0:
		return stepEnd
	case mt.isRegular(planned):
		return stepText
	}
	return stepSpecial
}

// isRegular reports whether id is a token other than a special one.
func (mt *ModelTokenizer) isRegular(id int32) bool {
	_, ok := slices.BinarySearch(mt.regular, id)
	return ok
}

// policyTable returns the step levels of each step kind for skill.
func (mt *ModelTokenizer) policyTable(skill float64) policyTable {
	n := len(mt.regular)
	rest := func(count int) float64 { return math.Log(restMass / float64(count)) }
	var t policyTable
	t[stepText] = newStepLevels(skill, 0, rest(n-1), n-1)
	t[stepSpecial] = newStepLevels(skill, 0, rest(n), n)
	t[stepEnd] = newStepLevels(skill, 1, rest(n), n)
	return t
}

// stepToken returns the token of member m of a level of group g in the step
// whose planned token is planned; members of a level are in id order.
func (mt *ModelTokenizer) stepToken(planned int32, g tokenGroup, m int) int32 {
	switch g {
	case groupPlanned:
		return planned
	case groupSlips:
		return mt.endSlip
	case groupPlannedSlips:
		lo, hi := min(planned, mt.endSlip), max(planned, mt.endSlip)
		if m == 0 {
			return lo
		}
		return hi
	}
	if p, ok := slices.BinarySearch(mt.regular, planned); ok && m >= p {
		m++
	}
	return mt.regular[m]
}

// isStopID reports whether tok is one of the model's stop tokens besides
// its eos.
func (mt *ModelTokenizer) isStopID(tok int32) bool { return slices.Contains(mt.stopIDs, tok) }

// appendTokenText appends a generated token's bytes to the output text,
// special tokens left out when skipSpecial, as Decode writes them.
func (mt *ModelTokenizer) appendTokenText(dst []byte, id int32, skipSpecial bool) []byte {
	if skipSpecial && !mt.isRegular(id) {
		return dst
	}
	return append(dst, mt.tok.TokenBytes(id)...)
}

// appendTokenKey appends a token's JSON string as logprobs show it: its
// decoded text, as vLLM shows it, or "token_id:<id>" with asIDs.
func (mt *ModelTokenizer) appendTokenKey(dst []byte, id int32, asIDs bool) []byte {
	if asIDs {
		return append(strconv.AppendInt(append(dst, `"token_id:`...), int64(id), 10), '"')
	}
	return jsonw.AppendString(dst, mt.tok.Decode([]int32{id}, false))
}

// appendTokenBytes appends the UTF-8 bytes of a token's decoded text as a
// JSON array, as vLLM's chat logprobs give them.
func (mt *ModelTokenizer) appendTokenBytes(dst []byte, id int32) []byte {
	dst = append(dst, '[')
	for i, c := range []byte(mt.tok.Decode([]int32{id}, false)) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(c), 10)
	}
	return append(dst, ']')
}
