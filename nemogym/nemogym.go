// Package nemogym reads and writes NVIDIA NeMo Gym data items, so that
// rollfleet runs NeMo Gym math datasets and its results can be read by NeMo
// Gym tooling.
//
// A data item is one JSONL row:
//
//	{"responses_create_params": {"input": [{"role": "system", …}, {"role": "user", …}], …},
//	 "question": "…", "expected_answer": "…",
//	 "agent_ref": {"type": "responses_api_agents", "name": "math_with_judge_simple_agent"}}
//
// PrepareItem builds one as NeMo Gym's math data carries it (or, with
// PromptSystem and LegacyAgentName, exactly as OpenRLHF's prepare_data does),
// and AppendPython writes it with Python's json.dumps defaults. Record is
// one result line as NeMo Gym's rollout collection writes it for math.
package nemogym

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SystemPrompt is the system message of NeMo Gym's math data items (two
// spaces after the first period, as the original).
const SystemPrompt = "Your task is to solve a math problem.  Make sure to put the answer (and only the answer) inside \\boxed{}."

// MathPrompt is the instruction line of NeMo Gym's own math data: the user
// message is this line, two newlines and the question.
const MathPrompt = "Solve the following math problem. Make sure to put the answer (and only answer) inside \\boxed{}."

// Agent reference of the math items: NeMo Gym's math agent, named
// math_with_judge_simple_agent since 2025-11 (LegacyAgentName before).
const (
	AgentType       = "responses_api_agents"
	AgentName       = "math_with_judge_simple_agent"
	LegacyAgentName = "library_judge_math_simple_agent"
)

// Prompt styles of a prepared item's input messages.
const (
	// PromptPlain is one user message, the question (the default).
	PromptPlain = "plain"
	// PromptNemo is one user message: MathPrompt, two newlines, the question.
	PromptNemo = "nemo"
	// PromptSystem is SystemPrompt as a system message and the question as
	// the user message, as OpenRLHF's prepare_data writes it.
	PromptSystem = "system"
)

// Field is one member of a JSON object, kept in its order.
type Field struct {
	Key   string
	Value json.RawMessage
}

// ErrNoQuestion is returned for an item that has neither a question nor a
// user message.
var ErrNoQuestion = errors.New("nemogym: item has no question")

// Message is one input message of responses_create_params.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// UnmarshalJSON accepts the Responses API's content forms: a string, or a
// list of parts whose texts are joined.
func (m *Message) UnmarshalJSON(data []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	m.Role = raw.Role
	if len(raw.Content) == 0 || string(raw.Content) == "null" {
		m.Content = ""
		return nil
	}
	if raw.Content[0] == '"' {
		return json.Unmarshal(raw.Content, &m.Content)
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw.Content, &parts); err != nil {
		return fmt.Errorf("content: want a string or a list of text parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	m.Content = b.String()
	return nil
}

// CreateParams is the part of responses_create_params rollfleet uses: the
// input messages and the sampling fields that override a run's defaults.
type CreateParams struct {
	Input           []Message `json:"input"`
	Temperature     *float64  `json:"temperature,omitempty"`
	TopP            *float64  `json:"top_p,omitempty"`
	MaxOutputTokens *int32    `json:"max_output_tokens,omitempty"`
}

// AgentRef names the NeMo Gym agent meant to run an item.
type AgentRef struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Item is one NeMo Gym data item.
type Item struct {
	CreateParams   CreateParams `json:"responses_create_params"`
	Question       string       `json:"question"`
	ExpectedAnswer string       `json:"expected_answer"`
	AgentRef       *AgentRef    `json:"agent_ref,omitempty"`
	// Extra are the input row's other fields, written after agent_ref.
	Extra []Field `json:"-"`
}

// Prepare builds the data item for a question and its expected answer
// exactly as OpenRLHF's prepare_data does: the math system prompt, the
// question as the user message, and the agent under its old name
// (LegacyAgentName). temperature and maxOutputTokens are added to
// responses_create_params when not nil.
func Prepare(question, expectedAnswer string, temperature *float64, maxOutputTokens *int32) Item {
	it, _ := PrepareItem(question, expectedAnswer, PrepareOptions{
		Temperature: temperature, MaxOutputTokens: maxOutputTokens, Prompt: PromptSystem, AgentName: LegacyAgentName,
	})
	return it
}

// PrepareItem builds the data item for a question and its expected answer:
// the input messages of opts.Prompt (PromptPlain when empty), the agent
// opts.AgentName (AgentName when empty) and the sampling fields that are not
// nil. An unknown prompt style is an error.
func PrepareItem(question, expectedAnswer string, opts PrepareOptions) (Item, error) {
	var input []Message
	switch opts.Prompt {
	case "", PromptPlain:
		input = []Message{{Role: "user", Content: question}}
	case PromptNemo:
		input = []Message{{Role: "user", Content: MathPrompt + "\n\n" + question}}
	case PromptSystem:
		input = []Message{{Role: "system", Content: SystemPrompt}, {Role: "user", Content: question}}
	default:
		return Item{}, fmt.Errorf("nemogym: prompt style %q: want %s, %s or %s", opts.Prompt, PromptPlain, PromptNemo, PromptSystem)
	}
	name := opts.AgentName
	if name == "" {
		name = AgentName
	}
	return Item{
		CreateParams: CreateParams{Input: input, Temperature: opts.Temperature, MaxOutputTokens: opts.MaxOutputTokens},
		Question:     question, ExpectedAnswer: expectedAnswer,
		AgentRef: &AgentRef{Type: AgentType, Name: name},
	}, nil
}

// UserQuestion is the item's question: its question field, or else the text
// of its last user message.
func (it *Item) UserQuestion() (string, error) {
	if it.Question != "" {
		return it.Question, nil
	}
	for i := len(it.CreateParams.Input) - 1; i >= 0; i-- {
		if m := it.CreateParams.Input[i]; m.Role == "user" && m.Content != "" {
			return m.Content, nil
		}
	}
	return "", ErrNoQuestion
}

// AppendPython appends the item as Python's json.dumps writes the dict
// prepare_data returns: keys in its order, ", " and ": " separators, and
// every non-ASCII character escaped. It fails only on a row's own field
// that Python's json could not write either (nested too deep).
func (it *Item) AppendPython(b []byte) ([]byte, error) {
	b = append(b, `{"responses_create_params": {"input": [`...)
	for i, m := range it.CreateParams.Input {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, `{"role": `...)
		b = appendPyString(b, m.Role)
		b = append(b, `, "content": `...)
		b = appendPyString(b, m.Content)
		b = append(b, '}')
	}
	b = append(b, ']')
	if t := it.CreateParams.Temperature; t != nil {
		b = appendPyFloat(append(b, `, "temperature": `...), *t)
	}
	if p := it.CreateParams.TopP; p != nil {
		b = appendPyFloat(append(b, `, "top_p": `...), *p)
	}
	if n := it.CreateParams.MaxOutputTokens; n != nil {
		b = append(b, fmt.Sprintf(`, "max_output_tokens": %d`, *n)...)
	}
	b = append(b, `}, "question": `...)
	b = appendPyString(b, it.Question)
	b = append(b, `, "expected_answer": `...)
	b = appendPyString(b, it.ExpectedAnswer)
	if r := it.AgentRef; r != nil {
		b = append(b, `, "agent_ref": {"type": `...)
		b = appendPyString(b, r.Type)
		b = append(b, `, "name": `...)
		b = appendPyString(b, r.Name)
		b = append(b, '}')
	}
	for _, f := range it.Extra {
		b = append(appendPyString(append(b, ", "...), f.Key), ": "...)
		var err error
		if b, err = AppendPythonJSON(b, f.Value); err != nil {
			return b, fmt.Errorf("nemogym: field %q: %w", f.Key, err)
		}
	}
	return append(b, '}'), nil
}
