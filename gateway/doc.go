// Package gateway is an OpenAI-compatible HTTP server in front of the LLM workers: an agent
// that speaks vLLM's API (a NeMo Gym agent, an OpenAI client) calls it as it would call vLLM,
// and every call is routed over NATS to the LLM workers, token ids in and out. Every call is
// recorded in a session's token trace, and finishing the session publishes that trace as
// trajectories in exactly the form the trainer consumes.
//
// # Endpoints
//
//	GET    /health                     200 while connected to NATS
//	GET    /v1/models                  the served model and its max_model_len
//	POST   /tokenize                   text, or messages through the model's chat template
//	POST   /detokenize
//	POST   /v1/chat/completions        messages → tokenize → generate
//	POST   /v1/completions             a token-id or text prompt → generate
//	POST   /v1/responses               the Responses API, served by the chat path
//	GET    /v1/sessions/{id}           a session's calls, tokens and segments
//	POST   /v1/sessions/{id}/finish    publish the session's trajectories with a reward
//	POST   /v1/sessions/finish         the same for the session named by metadata or session_id
//	POST   /v1/sessions/verify         the same for the session a NeMo Gym verify result ends
//	DELETE /v1/sessions/{id}           discard the session (a failure record says so)
//
// Requests and responses have vLLM's field names and defaults. Each request carries its own
// sampling settings (temperature, top_p, top_k, min_p, penalties, seed, stop, max_tokens or
// max_completion_tokens, ...): nothing is shared between requests. Chat messages are rendered
// by the model's own chat template on the model server, honouring add_generation_prompt,
// continue_final_message and chat_template_kwargs. Responses carry the model's real
// finish_reason, logprobs of the sampled tokens (as "token_id:<id>" strings with
// return_tokens_as_token_ids), token_ids and prompt_token_ids with return_token_ids, and
// usage. Tools are rendered by the model's template and the model's tool calls are parsed
// into tool_calls (Options.ToolCallParser, Hermes/Qwen format); reasoning of re-sent assistant
// turns is rendered too and split out of replies (Options.ReasoningParser, Qwen3's <think>);
// reasoning_effort is passed to the template. Structured output (response_format json_schema
// and json_object, Responses text.format, vLLM's guided_* and structured_outputs) and forced
// tool calls (tool_choice "required" or naming a function) go to the model server's guided
// decoding (see structured.go), and a forced reply is read as the tool calls it was forced to
// be. Chat top_logprobs and completions logprobs N come from the model server. A call with
// n > 1 draws n samples of the prompt, recorded as one group (see Groups of samples). Features
// the gateway cannot honour (best_of, beam search, ...) are refused with a 400 rather than
// ignored. Errors have OpenAI's body, {"error": {"message",
// "type", "param", "code"}}: type "invalid_request_error" for a 4xx and "server_error" for a
// 5xx, param the path of a body field of the wrong JSON type, code null. The status is 400
// for a bad request, a prompt beyond the context window or a request the model server
// refused, 404 for an unknown model, session or endpoint, 405 (with Allow) for a method the
// endpoint does not take, 409 for a session in use or already ended, 413 for a body over the
// size limit, 429 when too many sessions are open, 502 for an LLM worker's unreadable answer,
// 503 when no LLM worker or model server can serve the call and 504 when they do not answer
// in time. A message is in the client's terms: the addresses, subjects and wording of what
// failed behind the gateway go to its log only.
//
// # Streaming
//
// With "stream": true the three generation endpoints answer with server-sent events, as
// OpenAI and vLLM stream them: chat.completion.chunk and text_completion chunks ending with
// "data: [DONE]" (and a usage chunk first with stream_options.include_usage), and for
// Responses the response.created … response.completed events. The model side does not
// stream: a call is generated whole and recorded in its session before its first event is
// written, so the first byte comes when the whole answer is ready, and a client that goes
// away mid-stream leaves its session with the call recorded whole, or (gone during the
// generation) not at all, never in part. Text comes one delta per token when the tokens'
// texts are fetched (with logprobs), else in one delta.
//
// # Sessions
//
// A call names its session with the X-Session-ID header, a session_id member or
// extra_body.session_id. The first call opens the session. A call naming none attaches to the
// open session of its scope (API key and X-Session-Scope header) whose trace its prompt
// extends, the longest, or opens one with a generated id (echoed in X-Session-ID); such a
// session can be finished by its id, by the metadata of its first call, or by a verify result
// carrying its last call's tokens. Each call appends to the session's
// trace the prompt tokens beyond the trace (non-action tokens, logprob 0), then the completion
// as one action range with its logprobs. A prompt that does not start with the trace (the
// client edited the history, or re-tokenizing the text gave other tokens) starts a new segment;
// it is never merged, and the answer's X-Session-Drift header says so. Calls on one session
// must be sequential: a second call while one is running gets a 409.
//
// # Conversations sent back
//
// Agent frameworks send a conversation back re-serialized, which renders to other tokens than
// the model sampled. A session therefore remembers its current segment's last chat call: the
// messages as rendered and the reply as returned (content, reasoning, tool calls with their
// exact argument text). A chat call of the session whose messages begin with those
// messages and then an assistant message meaning the same as the reply gets the originals in
// their place before rendering. Two messages mean the same when they have the same role and
//   - content equal as text (text parts joined with newlines), or equal once each run of
//     U+FFFD and invalid UTF-8 bytes in either is taken as one unreadable run;
//   - reasoning equal by that rule, or absent from the client's copy (clients drop it);
//   - tool calls as many, in order, with the same function names and arguments equal as JSON
//     values (any whitespace, key order or number spelling; a string or the object itself);
//     call ids may differ, and tool messages answering a rewritten id get the original back;
//   - the same tool_call_id after that mapping; names are ignored (the original's stay).
//
// When the matched conversation still renders to a prompt that does not extend the trace (a
// template that drops earlier turns' reasoning, as Qwen3's does once a new user message
// follows; U+FFFD, which never renders back to the bytes sampled), the prompt is the trace
// followed by the template's tokens for the messages after the reply
// (messages.ChatTokenizeRequest.AfterAssistant), the reply's sampled end-of-turn token kept in
// place of the template's: the model sees its earlier turns exactly as sampled, including
// reasoning a plain vLLM rendering would drop, and the session stays one segment.
// Options.NoContinueTrace renders as vLLM does instead, and the call starts a new segment. An
// edited history matches nothing and drifts as before. A call without a session id first
// looks for the open session of its scope whose last call and reply its messages repeat so
// (the longest such conversation), and otherwise is attached by its tokens as above.
//
// # Groups of samples
//
// A chat or completion call with n > 1 on session S records sample 0 in S and sample k in a
// session "S~k" (ForkSuffix) that starts as a copy of S; choice k names its session. The n
// sessions are placed in one group (group id S, sample index k, group size n), the default
// of their finish, and each goes on and is finished on its own. The samples are generated at
// once, routed by S, sample k with seed+k when a seed is given; the call records all or none.
//
// Finishing a session with a reward publishes one Trajectory per segment on the trajectory
// subject of its env, with the episode id as JetStream message id so that a retried finish
// never stores twice: episode id "<session>" for the first segment and "<session>/seg<k>" for
// the others. Every segment carries the reward on its last call (its other calls' step rewards
// are 0); extra_logs gain turn_count, segment_index, segment_count and drift, info gains
// session_id and, for a segment after drift, drift_reason. A session idle for longer than
// Options.SessionTTL is expired as abandoned, and a DELETE discards one; either way a Failure
// record (kind "episode") is published, so no session vanishes silently; so are the sessions
// still open when the gateway stops. The ids of ended
// sessions are refused for Options.FinishedTTL.
package gateway
