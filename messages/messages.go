package messages

import "encoding/json"

// Version is the wire version written into every message's V field. Decode rejects messages
// without a version (V == 0) and messages newer than this build understands.
const Version uint8 = 1

// Error codes carried by GenerateReply.Code and TokenizeReply.Code.
const (
	// CodeContextLength means the prompt is too long for the model: the episode ends truncated,
	// it does not fail.
	CodeContextLength = "context_length"
	// CodeInvalid means the request itself is bad; retrying it elsewhere cannot help.
	CodeInvalid = "invalid"
	// CodeUnavailable means no model endpoint could serve the request.
	CodeUnavailable = "unavailable"
)

// Failure kinds, the last token of a failure subject.
const (
	// FailureEpisode records an episode that could not be completed.
	FailureEpisode = "episode"
	// FailureMalformed records a message that could not be decoded or validated.
	FailureMalformed = "malformed"
	// FailureInvariant records an episode whose steps could not form a trajectory that keeps the
	// trajectory invariants (see Trajectory.Validate).
	FailureInvariant = "invariant"
	// FailurePromptTooLong records an episode whose prompt left no room for generation within
	// max_length, under PromptOverflowFail.
	FailurePromptTooLong = "prompt_too_long"
	// FailureStale records an episode dropped because the policy moved on by more than its
	// max_staleness (StaleDrop).
	FailureStale = "stale"
)

// MaxIDLength bounds episode and group ids (and env ids), which become subject tokens and
// JetStream message ids.
const MaxIDLength = 512

// MaxFailurePayload bounds Failure.Payload: enough of a malformed message to diagnose it without
// copying the whole of it into the failure stream.
const MaxFailurePayload = 1024

// Tokens is a sequence of token ids. On the msgpack wire it is one bin value of packed
// little-endian int32s; in JSON it is an array of numbers.
type Tokens []int32

// Logprobs is a sequence of per-token log-probabilities. On the msgpack wire it is one bin value
// of packed little-endian float32s; in JSON it is an array of numbers, each the shortest decimal
// that reads back as the same float32.
type Logprobs []float32

// Range is a half-open [Start, End) span of positions in Trajectory.ObservationTokens.
// Its JSON form is the pair [start, end].
type Range struct {
	Start, End int32
}

// Ranges is a list of spans. On the msgpack wire it is one bin value of packed little-endian
// int32 pairs (start, end); in JSON it is an array of [start, end] pairs.
type Ranges []Range

// SamplingParams are the per-episode sampling settings passed through to the model server.
type SamplingParams struct {
	Temperature float64  `msgpack:"t"  json:"temperature"`
	TopP        float64  `msgpack:"p"  json:"top_p,omitempty"`      // 0 = unset (1.0)
	TopK        int32    `msgpack:"k"  json:"top_k,omitempty"`      // 0 or -1 = off
	MaxTokens   int32    `msgpack:"m"  json:"max_tokens,omitempty"` // per-turn cap, 0 = none
	Stop        []string `msgpack:"s,omitempty" json:"stop,omitempty"`
	Seed        *int64   `msgpack:"sd,omitempty" json:"seed,omitempty"`
	// The fields below are passed to the model server only when set; their zero values leave
	// the server's defaults (and the RL settings of the LLM worker) in place.
	MinP              float64 `msgpack:"mp,omitempty" json:"min_p,omitempty"`              // 0 = off
	PresencePenalty   float64 `msgpack:"pp,omitempty" json:"presence_penalty,omitempty"`   // 0 = off
	FrequencyPenalty  float64 `msgpack:"fp,omitempty" json:"frequency_penalty,omitempty"`  // 0 = off
	RepetitionPenalty float64 `msgpack:"rp,omitempty" json:"repetition_penalty,omitempty"` // 0 = unset (1.0)
	MinTokens         int32   `msgpack:"mn,omitempty" json:"min_tokens,omitempty"`
	StopTokenIDs      Tokens  `msgpack:"si,omitempty" json:"stop_token_ids,omitempty"`
	IgnoreEOS         bool    `msgpack:"ie,omitempty" json:"ignore_eos,omitempty"`
	// SkipSpecialTokens leaves special tokens out of the reply's text (vLLM's default for
	// OpenAI clients); false keeps them, as RL rollouts want. Token ids are never affected.
	SkipSpecialTokens      bool `msgpack:"ss,omitempty" json:"skip_special_tokens,omitempty"`
	IncludeStopStrInOutput bool `msgpack:"is,omitempty" json:"include_stop_str_in_output,omitempty"`
	// StructuredOutputs constrains the reply as vLLM's structured_outputs object does: exactly
	// one of "json" (a JSON schema), "json_object" (true), "choice" (a list of strings),
	// "regex", "grammar" or "structural_tag"; empty leaves the reply free.
	StructuredOutputs json.RawMessage `msgpack:"so,omitempty" json:"structured_outputs,omitempty"`
}

// StructuredOutputKinds are the keys of SamplingParams.StructuredOutputs.
var StructuredOutputKinds = []string{"json", "json_object", "choice", "regex", "grammar", "structural_tag"}

// EpisodeRequest asks an env worker to run one episode; it is the work item of the episodes
// stream.
type EpisodeRequest struct {
	V uint8 `msgpack:"v"`
	// RunID is the job the episode belongs to: its subjects, and those of its outcomes and
	// group, carry it, so runs sharing a server never mix. Empty is a run of its own.
	RunID        string  `msgpack:"rid,omitempty"`
	EpisodeID    string  `msgpack:"id"`
	GroupID      string  `msgpack:"g"`
	SampleIndex  int32   `msgpack:"i"`
	GroupSize    int32   `msgpack:"n"` // n samples per prompt, ≥ 1
	Env          string  `msgpack:"e"`
	EnvOptions   []byte  `msgpack:"eo,omitempty"` // JSON object of env constructor overrides, or empty
	EnvSeed      *uint64 `msgpack:"es,omitempty"` // seed of the env's RNG; nil = random
	Prompt       string  `msgpack:"p,omitempty"`  // empty = the env's own instructions
	ChatTemplate bool    `msgpack:"ct,omitempty"` // wrap Prompt as the first user turn of the chat template
	// ChatTemplateName chooses the template of a chat-style episode: empty is the model's own,
	// rendered by the model server; TemplateChatML is rollfleet's ChatML, for a server that
	// cannot render (see docs/run.md).
	ChatTemplateName string `msgpack:"ctn,omitempty"`
	// ChatTemplateKwargs is a JSON object of extra template variables passed to every render
	// of the episode (such as {"enable_thinking": false}), or empty.
	ChatTemplateKwargs []byte         `msgpack:"ctk,omitempty"`
	Label              string         `msgpack:"l,omitempty"`
	Sampling           SamplingParams `msgpack:"sp"`
	MaxLength          int32          `msgpack:"ml"`           // whole-trajectory token budget, > 0
	MaxTurns           int32          `msgpack:"mt,omitempty"` // 0 = env default
	SubmitTime         int64          `msgpack:"ts"`           // unix nanoseconds
	// SubmitVersion is the policy version current when the episode was submitted.
	SubmitVersion int64 `msgpack:"sv,omitempty"`
	// MaxStaleness bounds how far the policy may move on during the episode: a turn starts
	// only while the current version minus the version of the episode's first turn is at most
	// this. Nil takes the env worker's default; a negative value means no bound.
	MaxStaleness *int32 `msgpack:"mxs,omitempty"`
	// StalePolicy is what happens to an episode past its bound: StaleDrop, StaleRestart or
	// StaleKeep; empty takes the env worker's default.
	StalePolicy string `msgpack:"stp,omitempty"`
	// ObsStyle is how observations become prompts: ObsChat (empty means it), ObsConcat or
	// ObsQwen3Game.
	ObsStyle string `msgpack:"os,omitempty"`
	// Messages, when set, are the first prompt as chat messages (a system prompt, say) rendered
	// by the model's chat template; they take precedence over Prompt for the model's input.
	Messages []ChatMessage `msgpack:"ms,omitempty"`
	// TaskIndex is the dataset row this episode came from (NeMo Gym's _ng_task_index).
	TaskIndex int32 `msgpack:"ti,omitempty"`
	// RolloutIndex numbers the episodes of one task across the run (NeMo Gym's
	// _ng_rollout_index), so that no two share a (task, rollout) pair when rows are reused;
	// zero means SampleIndex.
	RolloutIndex int32 `msgpack:"ri,omitempty"`
	// PromptOverflow is what happens to a prompt that leaves no room for generation:
	// PromptOverflowFail (empty means it) or PromptOverflowTruncateLeft.
	PromptOverflow string `msgpack:"po,omitempty"`
	// TraceID is the episode's W3C trace id (32 lowercase hex digits), set at submission and
	// carried by its steps, its traceparent headers and its outcome. Empty lets the env worker
	// take the one of the request's traceparent header, or derive one.
	TraceID string `msgpack:"tid,omitempty"`
}

// Settings of EpisodeRequest.PromptOverflow. A prompt overflows when it leaves no room for one
// turn's generation: more than max_length minus the per-turn max_tokens (or 1 when unset).
const (
	// PromptOverflowFail ends an episode whose prompt overflows as a failure of kind
	// FailurePromptTooLong. In a single-turn style, a later turn's prompt outgrowing the budget
	// ends the episode as a truncated trajectory instead, as running out of max_length does.
	PromptOverflowFail = "fail"
	// PromptOverflowTruncateLeft keeps the end of an overflowing prompt, as OpenRLHF does, but
	// cuts only message content, never the chat template's role headers; the trajectory records
	// how many tokens were cut.
	PromptOverflowTruncateLeft = "truncate-left"
)

// PromptOverflows lists the settings of EpisodeRequest.PromptOverflow, the default first.
var PromptOverflows = []string{PromptOverflowFail, PromptOverflowTruncateLeft}

// TemplateChatML is the EpisodeRequest.ChatTemplateName of rollfleet's own ChatML template.
const TemplateChatML = "chatml"

// ChatTemplateNames lists the settings of EpisodeRequest.ChatTemplateName, the default first.
var ChatTemplateNames = []string{"", TemplateChatML}

// Observation styles of EpisodeRequest.ObsStyle.
const (
	// ObsChat plays the episode as one multi-turn conversation in the model's chat template (or
	// ChatML, by EpisodeRequest.ChatTemplateName): the trajectory is one
	// token sequence with an action range per turn.
	ObsChat = "chat"
	// ObsConcat is GEM's concat wrapper: each turn's prompt is the history of observations plus
	// the env's suffix, as plain text; the trajectory has one sample per turn.
	ObsConcat = "concat"
	// ObsQwen3Game is ObsConcat's prompt wrapped in GEM's qwen3_game single-turn chat template.
	ObsQwen3Game = "qwen3_game"
)

// ObsStyles lists the observation styles, the default first.
var ObsStyles = []string{ObsChat, ObsConcat, ObsQwen3Game}

// SingleTurnStyle reports whether an observation style builds a fresh prompt every turn, so
// that each turn is a sample of its own.
func SingleTurnStyle(style string) bool { return style == ObsConcat || style == ObsQwen3Game }

// GenerateRequest asks an LLM worker for one model turn, token ids in.
type GenerateRequest struct {
	V         uint8          `msgpack:"v"`
	EpisodeID string         `msgpack:"id"`
	Turn      int32          `msgpack:"tn"`
	Prompt    Tokens         `msgpack:"pt"`
	Sampling  SamplingParams `msgpack:"sp"`
	MaxTokens int32          `msgpack:"m"` // this turn's budget, > 0
	// TopLogprobs asks for the most likely tokens at each position besides the sampled one
	// (vLLM's logprobs=N, at most MaxTopLogprobs); 0 for none.
	TopLogprobs int32 `msgpack:"tlp,omitempty"`
	// Deadline (unix nanoseconds; 0 = none) is when the requester stops
	// waiting: work still queued then is dropped, and model calls end by it.
	Deadline int64 `msgpack:"dl,omitempty"`
}

// MaxTopLogprobs bounds GenerateRequest.TopLogprobs, as vLLM's default max_logprobs does.
const MaxTopLogprobs = 20

// TopLogprobs are the most likely tokens at one position of a reply, most likely first, with
// their log-probabilities.
type TopLogprobs struct {
	IDs      Tokens   `msgpack:"i"`
	Logprobs Logprobs `msgpack:"l"`
}

// GenerateReply answers a GenerateRequest: the sampled token ids exactly as the engine returned
// them, with their log-probabilities, or an error with a Code.
type GenerateReply struct {
	V            uint8    `msgpack:"v"`
	Tokens       Tokens   `msgpack:"tk"`
	Logprobs     Logprobs `msgpack:"lp"`
	Text         string   `msgpack:"tx"`
	FinishReason string   `msgpack:"fr"`
	// TopLogprobs holds, when the request asked for them, one entry per token of Tokens.
	TopLogprobs []TopLogprobs `msgpack:"tlp,omitempty"`
	// EndOfTurn is true when the model ended its turn itself: the server stopped on an
	// end-of-sequence or stop token (finish reason "stop" without a stop string), which is the
	// last of Tokens. vLLM leaves a stop token's text out of Text, so Text cannot tell.
	EndOfTurn bool   `msgpack:"eot,omitempty"`
	Endpoint  string `msgpack:"ep"`
	// PolicyVersion is the fleet's policy version (PolicyState.Version) the tokens were
	// generated under.
	PolicyVersion int64 `msgpack:"pv,omitempty"`
	// QueueNanos is how long the request waited in the LLM worker before its model call (the
	// worker's queue, a pause, a free slot on a model server); ModelNanos is the model call.
	QueueNanos int64  `msgpack:"qn,omitempty"`
	ModelNanos int64  `msgpack:"mn,omitempty"`
	Error      string `msgpack:"err,omitempty"`
	Code       string `msgpack:"c,omitempty"`
}

// ChatMessage is one turn of a chat to be rendered by the model's chat template. The optional
// fields carry what the OpenAI chat API adds for tool use and reasoning models; at their zero
// values a message is exactly what it was without them.
type ChatMessage struct {
	Role    string `msgpack:"r" json:"role"`
	Content string `msgpack:"c" json:"content"`
	// Reasoning is an assistant turn's reasoning (the API's reasoning_content or reasoning),
	// which the template renders as the model wrote it (Qwen3: a <think> block).
	Reasoning string `msgpack:"rs,omitempty" json:"reasoning_content,omitempty"`
	// ToolCalls is an assistant turn's tool calls, a JSON array in the API's shape
	// ([{"id","type":"function","function":{"name","arguments"}}]), or empty.
	ToolCalls json.RawMessage `msgpack:"tc,omitempty" json:"tool_calls,omitempty"`
	// ToolCallID is the id of the call a "tool" message answers.
	ToolCallID string `msgpack:"ti,omitempty" json:"tool_call_id,omitempty"`
	// Name is the optional name of the message's author or tool.
	Name string `msgpack:"n,omitempty" json:"name,omitempty"`
}

// TokenizeRequest asks an LLM worker to tokenize either plain text or chat messages.
type TokenizeRequest struct {
	V                   uint8         `msgpack:"v"`
	EpisodeID           string        `msgpack:"id,omitempty"` // for endpoint stickiness
	Text                string        `msgpack:"tx,omitempty"`
	Messages            []ChatMessage `msgpack:"ms,omitempty"`
	AddGenerationPrompt bool          `msgpack:"ag,omitempty"`
	AddSpecialTokens    bool          `msgpack:"as,omitempty"`
	// ChatTemplateKwargs, with Messages or Turn, is a JSON object of extra template variables,
	// or empty.
	ChatTemplateKwargs []byte `msgpack:"kw,omitempty"`
	// Turn, when set, asks for the tokens the model's chat template puts after an assistant
	// turn when a user message whose content is Text follows it: from the template's
	// end-of-turn token that closes the assistant turn, through the user message, to the
	// generation prompt (TurnNext) or to the end of the conversation (TurnFinal).
	Turn TurnKind `msgpack:"tu,omitempty"`
	// Deadline is as in GenerateRequest.
	Deadline int64 `msgpack:"dl,omitempty"`
}

// TurnKind says what a TokenizeRequest's Turn asks for.
type TurnKind uint8

// Kinds of TokenizeRequest.Turn.
const (
	// TurnNone tokenizes Text or Messages as they are.
	TurnNone TurnKind = iota
	// TurnNext is a user turn the model answers: the generation prompt follows it.
	TurnNext
	// TurnFinal is the user turn that ends the conversation.
	TurnFinal
)

// TokenizeReply answers a TokenizeRequest.
type TokenizeReply struct {
	V      uint8  `msgpack:"v"`
	Tokens Tokens `msgpack:"tk"`
	Error  string `msgpack:"err,omitempty"`
	Code   string `msgpack:"c,omitempty"`
}

// StepEvent is one model turn of an episode and the environment's answer to it, published by the
// env worker and assembled by the collector.
type StepEvent struct {
	V uint8 `msgpack:"v"`
	// RunID is the episode's EpisodeRequest.RunID, on every step, so that an outcome reaches
	// its run's subjects even when the request itself (turn 0) was never seen.
	RunID     string `msgpack:"rid,omitempty"`
	EpisodeID string `msgpack:"id"`
	Turn      int32  `msgpack:"tn"` // 0-based model turn
	// Attempt numbers the runs of an episode (its delivery count): a redelivered episode starts
	// over, and the collector keeps only the steps of the latest attempt it has seen.
	Attempt int32 `msgpack:"a,omitempty"`
	// Request is the episodes-stream sequence of the request this run plays (0 when unknown).
	// An episode id submitted twice is two requests: their runs are told apart by it and
	// never spliced into one trajectory.
	Request uint64 `msgpack:"rq,omitempty"`
	// Run is a nonce of the delivery that played this run. Delivery counts (Attempt) can repeat
	// when a server restarts from older consumer state; the nonce cannot, so two deliveries'
	// steps never share a message id or a run.
	Run          string          `msgpack:"ru,omitempty"`
	Episode      *EpisodeRequest `msgpack:"er,omitempty"` // turn 0 only: the request, so the collector needs nothing else
	PromptTokens Tokens          `msgpack:"pt,omitempty"` // turn 0, or every turn of a single-turn style
	// PromptMessages are, on turn 0 of a chat-style episode, the messages its first prompt
	// rendered; empty for a plain-text prompt.
	PromptMessages []ChatMessage `msgpack:"pm,omitempty"`
	ActionTokens   Tokens        `msgpack:"at"`
	ActionLogprobs Logprobs      `msgpack:"al"`
	ActionText     string        `msgpack:"ax"`
	// FeedbackText is the env's answer to the action: in a chat style the content of the user
	// message FeedbackTokens render, in a single-turn style the observation.
	FeedbackText   string             `msgpack:"fx"`
	FeedbackTokens Tokens             `msgpack:"ft"`
	Reward         float64            `msgpack:"r"`
	Score          float64            `msgpack:"s"`
	Done           bool               `msgpack:"d"`
	Truncated      bool               `msgpack:"tr"`
	FinishReason   string             `msgpack:"fr"`
	ExtraLogs      map[string]float64 `msgpack:"xl,omitempty"`
	// Info carries the env's text results of this step (a verifier's extracted_answer, say).
	Info map[string]string `msgpack:"in,omitempty"`
	// Success is the env's verdict that the episode was won (set on the final step).
	Success bool `msgpack:"ok,omitempty"`
	// PromptTruncated counts the tokens cut from the start of this step's prompt to fit it
	// (PromptOverflowTruncateLeft); PromptTokens holds what was kept.
	PromptTruncated int32 `msgpack:"ptc,omitempty"`
	// Resumed counts how often the episode moved to another worker and went
	// on from its last completed turn. A resumed attempt republishes the
	// steps it continues under its own attempt number, so that each attempt
	// is complete on its own.
	Resumed  int32  `msgpack:"rs,omitempty"`
	EnvState []byte `msgpack:"st,omitempty"` // JSON snapshot of the env after this step
	Endpoint string `msgpack:"ep,omitempty"`
	// PolicyVersion is the policy version this turn's action was generated under.
	PolicyVersion int64 `msgpack:"pv,omitempty"`
	// Restarts counts how often the episode was played again from its start because its
	// policy moved on too far (StaleRestart); the steps are those of the latest play.
	Restarts int32 `msgpack:"rst,omitempty"`
	// Stale is set once the episode went past its max_staleness and played on (StaleKeep).
	Stale         bool   `msgpack:"sto,omitempty"`
	GenerateNanos int64  `msgpack:"gn,omitempty"`
	StepNanos     int64  `msgpack:"sn,omitempty"`
	Error         string `msgpack:"err,omitempty"` // the episode failed at this turn; the collector emits a Failure
	// FailureKind is the kind of the Failure an Error step asks for: FailureEpisode (empty
	// means it), FailurePromptTooLong or FailureStale.
	FailureKind string `msgpack:"fk,omitempty"`
	// TraceID is the episode's trace id (EpisodeRequest.TraceID), on every step.
	TraceID string `msgpack:"tid,omitempty"`
	// Timings says where the turn's time went.
	Timings TurnTimings `msgpack:"tm,omitempty"`
}

// IsEndMarker reports whether e only marks the end of its episode: no action tokens, Done and no
// Error. The episode ended (for example at the context length) without another model turn, so
// the marker is not counted as a turn.
func (e *StepEvent) IsEndMarker() bool {
	return len(e.ActionTokens) == 0 && e.Done && e.Error == ""
}

// Trajectory is one finished episode in exactly the form OpenRLHF's trainer consumes, plus
// rollfleet's bookkeeping. The JSON field names are OpenRLHF's and are used for JSONL output.
type Trajectory struct {
	V                 uint8              `msgpack:"v" json:"-"`
	RunID             string             `msgpack:"rid,omitempty" json:"run_id,omitempty"`
	EpisodeID         string             `msgpack:"id" json:"episode_id"`
	GroupID           string             `msgpack:"g"  json:"group_id"`
	SampleIndex       int32              `msgpack:"i"  json:"sample_index"`
	GroupSize         int32              `msgpack:"n"  json:"group_size"`
	Env               string             `msgpack:"e"  json:"env"`
	EnvSeed           *uint64            `msgpack:"es,omitempty" json:"env_seed,omitempty"`
	Prompt            string             `msgpack:"p"  json:"prompt"`
	Label             string             `msgpack:"l"  json:"label"`
	ObservationTokens Tokens             `msgpack:"ot" json:"observation_tokens"`
	ActionRanges      Ranges             `msgpack:"ar" json:"action_ranges"`
	RolloutLogProbs   Logprobs           `msgpack:"lp" json:"rollout_log_probs"`
	Reward            float64            `msgpack:"r"  json:"reward"`
	Scores            float64            `msgpack:"s"  json:"scores"`
	ExtraLogs         map[string]float64 `msgpack:"xl" json:"extra_logs"`
	Truncated         bool               `msgpack:"tr" json:"truncated"`
	Turns             int32              `msgpack:"tn" json:"turns"`
	StepRewards       []float64          `msgpack:"sr" json:"step_rewards"`
	FinishReason      string             `msgpack:"fr" json:"finish_reason"`
	// PolicyVersions holds the policy version of each turn's action, one per action range
	// (per sample in a single-turn style).
	PolicyVersions []int64 `msgpack:"pv,omitempty" json:"policy_versions,omitempty"`
	// SubmitVersion is the policy version current when the episode was submitted.
	SubmitVersion int64 `msgpack:"sv,omitempty" json:"submit_policy_version"`
	// Staleness is how far the policy moved on during the episode: the newest turn's version
	// minus the first's (see the function Staleness).
	Staleness int64 `msgpack:"stl,omitempty" json:"staleness"`
	// Stale marks an episode that went past its max_staleness and was kept (StaleKeep).
	Stale bool `msgpack:"sto,omitempty" json:"stale"`
	// Restarts counts the plays from the start the episode needed to stay within its
	// max_staleness (StaleRestart).
	Restarts      int32 `msgpack:"rst,omitempty" json:"restarts"`
	SubmitTime    int64 `msgpack:"ts" json:"submit_time_ns"`
	DoneTime      int64 `msgpack:"dt" json:"done_time_ns"`
	GenerateNanos int64 `msgpack:"gn" json:"generate_ns"`
	// ObsStyle is the observation style that produced the trajectory (ObsChat when empty).
	ObsStyle string `msgpack:"os,omitempty" json:"obs_style"`
	// Samples holds one single-turn sample per turn for a single-turn style; the top-level
	// token fields are then empty.
	Samples []Sample `msgpack:"sm,omitempty" json:"samples,omitempty"`
	// Success is the env's verdict that the episode was won.
	Success bool `msgpack:"ok,omitempty" json:"success"`
	// Info holds the env's text results of the last step (expected_answer, extracted_answer …).
	Info map[string]string `msgpack:"in,omitempty" json:"info,omitempty"`
	// TaskIndex is the dataset row of the episode (NeMo Gym's _ng_task_index).
	TaskIndex int32 `msgpack:"ti,omitempty" json:"_ng_task_index"`
	// RolloutIndex is the request's (NeMo Gym's _ng_rollout_index); zero means SampleIndex.
	RolloutIndex int32 `msgpack:"ri,omitempty" json:"rollout_index"`
	// Responses are the model's texts, one per turn (per sample in a single-turn style), as
	// the model server decoded them; the NeMo Gym records' response output.
	Responses []string `msgpack:"rtx,omitempty" json:"responses"`
	// Resumed counts how often the episode moved to another env worker and
	// continued from its last completed turn.
	Resumed int32 `msgpack:"rs,omitempty" json:"resumed"`
	// PromptTruncated counts the prompt tokens cut to fit the budget
	// (PromptOverflowTruncateLeft): the first prompt's, or in a single-turn style the sum of the
	// samples' counts. Zero means no prompt was cut.
	PromptTruncated int32 `msgpack:"ptc,omitempty" json:"prompt_truncated_tokens,omitempty"`
	// TraceID is the episode's trace id (EpisodeRequest.TraceID).
	TraceID string `msgpack:"tid,omitempty" json:"trace_id,omitempty"`
	// PromptMessages are the chat messages the first prompt rendered (chat style), and Feedback
	// the content of the user message the env answered each turn with ("" where it did not):
	// with Responses they are the conversation, which JSON writes as "messages".
	PromptMessages []ChatMessage `msgpack:"pms,omitempty" json:"prompt_messages,omitempty"`
	Feedback       []string      `msgpack:"fb,omitempty" json:"feedback,omitempty"`
	// Timings holds one entry per turn (per sample in a single-turn style): where its time
	// went, and the model server that generated it. Empty when the steps carried none.
	Timings []TurnTimings `msgpack:"tm,omitempty" json:"timings,omitempty"`
}

// Conversation is a chat-style trajectory as chat messages: its first prompt's messages, then
// each turn's response as an assistant message followed by the env's feedback as a user
// message (where the env answered). It is nil when the first prompt was plain text.
func (t *Trajectory) Conversation() []ChatMessage {
	if len(t.PromptMessages) == 0 {
		return nil
	}
	out := make([]ChatMessage, 0, len(t.PromptMessages)+2*len(t.Responses))
	out = append(out, t.PromptMessages...)
	for i, r := range t.Responses {
		out = append(out, ChatMessage{Role: "assistant", Content: r})
		if i < len(t.Feedback) && t.Feedback[i] != "" {
			out = append(out, ChatMessage{Role: "user", Content: t.Feedback[i]})
		}
	}
	return out
}

// Sample is one turn of a trajectory played in a single-turn observation style: that turn's
// prompt followed by the model's action, in OpenRLHF's fields, so each trains as a sample of its
// own.
type Sample struct {
	ObservationTokens Tokens   `msgpack:"ot" json:"observation_tokens"`
	ActionRanges      Ranges   `msgpack:"ar" json:"action_ranges"`
	RolloutLogProbs   Logprobs `msgpack:"lp" json:"rollout_log_probs"`
	// Reward is this turn's step reward.
	Reward float64 `msgpack:"r" json:"reward"`
	// Return is the sum of this and every later step reward: the undiscounted return from
	// this turn, what a single-turn trainer credits the action with.
	Return float64 `msgpack:"rt" json:"return"`
	// PromptTruncated counts the tokens cut from the start of this turn's prompt to fit it.
	PromptTruncated int32 `msgpack:"ptc,omitempty" json:"prompt_truncated_tokens,omitempty"`
}

// Group is the n trajectories of one prompt, for group-baseline algorithms and dynamic filtering.
type Group struct {
	V            uint8        `msgpack:"v" json:"-"`
	RunID        string       `msgpack:"rid,omitempty" json:"run_id,omitempty"`
	GroupID      string       `msgpack:"g" json:"group_id"`
	Env          string       `msgpack:"e" json:"env"`
	MeanScore    float64      `msgpack:"ms" json:"mean_score"`
	Trajectories []Trajectory `msgpack:"t" json:"trajectories"`
}

// Failure records an episode or a message that could not be completed, with the reason, so that
// every submitted episode yields exactly one trajectory or one failure.
type Failure struct {
	V         uint8  `msgpack:"v" json:"-"`
	RunID     string `msgpack:"rid,omitempty" json:"run_id,omitempty"`
	EpisodeID string `msgpack:"id,omitempty" json:"episode_id,omitempty"`
	GroupID   string `msgpack:"g,omitempty" json:"group_id,omitempty"`
	Env       string `msgpack:"e,omitempty" json:"env,omitempty"`
	Kind      string `msgpack:"k" json:"kind"` // FailureEpisode, FailureMalformed, FailureInvariant …
	Reason    string `msgpack:"r" json:"reason"`
	Subject   string `msgpack:"sj,omitempty" json:"subject,omitempty"`
	Turn      int32  `msgpack:"tn,omitempty" json:"turn,omitempty"`
	Time      int64  `msgpack:"ts" json:"time_ns"`
	Payload   []byte `msgpack:"pl,omitempty" json:"payload,omitempty"` // first bytes of a malformed message (≤ MaxFailurePayload)
	// TraceID is the episode's trace id, when known.
	TraceID string `msgpack:"tid,omitempty" json:"trace_id,omitempty"`
}

// FailurePayload returns a copy of at most the first MaxFailurePayload bytes of data, for
// Failure.Payload: the copy keeps the record independent of a buffer the caller may reuse.
func FailurePayload(data []byte) []byte {
	return append([]byte(nil), data[:min(len(data), MaxFailurePayload)]...)
}
