// Package toyllm is a stand-in for a vLLM server, for tests and demos. It is
// not a language model: it recognises what it is asked from the prompt —
// GEM's GuessTheNumber, one of GEM's board games, or a math problem — plans a
// reply with a hand-written heuristic, and writes it through a byte-level
// tokenizer (or a real model's: see Real tokenizers) one sampled token at a
// time.
//
// It speaks the subset of vLLM's OpenAI-compatible HTTP API that rollout
// workers use, with vLLM's field names, defaults, response shapes and error
// bodies, so that the same client code runs against it and against a real
// vLLM server:
//
//	POST /v1/completions       prompt as token ids or text; logprobs, stop
//	                           strings and ids, return_token_ids, ...
//	POST /v1/chat/completions  messages (and tools) through the chat template
//	POST /tokenize             text, or messages (and tools) through the chat template
//	POST /detokenize
//	GET  /v1/models
//	GET  /health               200 with an empty body
//	GET  /metrics              vLLM's running and waiting request and
//	                           KV-cache usage gauges and prefix cache
//	                           counters, the policy's skill,
//	                           weight version and pause state, the
//	                           concurrency cap and the generations' running
//	                           time (busy fraction)
//
// and the endpoints of vLLM 0.16+'s development mode that a trainer calls
// to sync weights (vLLM serves them with VLLM_SERVER_DEV_MODE=1):
//
//	POST /pause                mode=abort|wait|keep: hold new generations
//	                           and abort, wait for or freeze those in flight
//	POST /resume
//	GET  /is_paused
//	POST /update_weights       {"update_info": {"skill": 9.5,
//	                           "weight_version": "step-3"}}
//	POST /start_weight_update  holds new generations until
//	POST /finish_weight_update {"weight_version": ...}, optional
//	GET  /weight_info          {"weight_version": ...}
//
// # Tokens
//
// Ids 0..255 are bytes; EndOfTextID, ImStartID and ImEndID are the special
// tokens <|endoftext|>, <|im_start|> and <|im_end|>. <|endoftext|> is the
// end-of-sequence token and <|im_end|> a stop token of the model's
// generation config, as with Qwen models: a reply that ends on <|im_end|>
// has finish_reason "stop" and stop_reason 258.
//
// # Real tokenizers
//
// Given Options.Tokenizer (LoadModelTokenizer; rollout toyllm --tokenizer
// DIR), the server speaks a real model's vocabulary instead, so that the
// token ids, special tokens and chat layout a client sees are those of the
// model it will train, and token-level bookkeeping can be checked against
// them without a GPU. /tokenize, /detokenize and the prompts use the model's
// tokenizer and its Hugging Face chat template, with vLLM's defaults (a
// text prompt gets the BOS, rendered messages do not; a model without a
// template answers chat requests with vLLM's error unless it was given
// one). The planners below still read ChatML: the decoded prompt is
// translated into a ChatML view, whose separators were learned at load by
// rendering probe conversations. A reply is the plan's text in the model's
// tokens followed by the template's end-of-turn token (<|im_end|>,
// <|eot_id|>, <end_of_turn>, ...). Each step gives the planned token the
// skill's logit and spreads the weight the byte vocabulary's other tokens
// have over the model's regular (not special) tokens, so that slips are
// about as frequent per token as in the byte mode; the end of turn may also
// slip to another stop token (the eos when it differs, or one of
// generation_config.json's eos_token_id). Stopping follows vLLM: the eos
// stops with stop_reason null, the end-of-turn token when it is another and
// generation_config.json's other eos ids with stop_reason their id.
// Logprobs show each token's decoded text. A thinking template (Qwen3's,
// whose generation prompt leaves the <think> block to the model unless
// enable_thinking is off) is answered as by a model that does not reason,
// unless Options.Reasoning (--reasoning) is set: then a reply to its bare
// generation prompt opens the block itself, reasons, closes it and answers,
// as Qwen3 does.
//
// # Policy
//
// A conversation offering tools (toolplan.go) gets a call of the first tool,
// with the user's message as its argument, and after a tool result an answer
// quoting it; with {"enable_thinking": true} in chat_template_kwargs every
// reply reasons first. The chat template (template.go) is ChatML with
// Qwen3's layout of tools, tool calls, tool results and reasoning. Board
// games (boardgames.go) get a usually legal move read off the latest board, math problems (math.go) an answer that is right about 80% of the
// time, and everything else GuessTheNumber's policy. For GuessTheNumber, the
// policy decodes the prompt and reads the game from it: the range from
// the instructions ("guess the number between {min} and {max}", 1..20 when
// absent), narrowed by every feedback line ("you guessed G, and the target
// number is higher/lower than G"). It then plans a short reply, usually a
// sentence and \boxed{N} at the middle of the remaining range, and
// sometimes, a few percent of the time each, another number of the range, a
// repeated guess, a number out of range, or a format slip (no box, or
// \boxed{ N}), so that rollouts show a spread of rewards. The plan is chosen
// with the request's temperature, min-p, top-k and top-p, so greedy decoding
// always bisects.
//
// Each token is then sampled from an explicit distribution over the whole
// vocabulary: the planned token has logit skill (DefaultSkill, 14, unless
// Options.Skill or an update says otherwise), its plausible slips (a
// neighbouring digit, the other letter case, ...) logit 6 and every other
// token logit 0, before the request's sampling settings apply. The logprob
// returned for a token is its true log-probability under the distribution it
// was sampled from, in float32, so importance ratios computed from it are
// exact. With a seed, a request always gets the same reply; without one, the
// reply is random.
//
// # Weights
//
// The policy's one parameter is its skill, in (0, MaxSkill]: the higher,
// the fewer slips, so a trainer that raises it through /update_weights sees
// rewards rise. vLLM's update_info describes tensors sent over NCCL; the
// stand-in's carries "skill" and an optional "weight_version", and refuses
// other keys. An update applies to generations that start after it; one in
// flight keeps the policy it started with, so that its logprobs stay those
// of the distribution it sampled from. While paused, new generation
// requests wait as long as their context lasts and count as waiting in
// /metrics. An abort-mode pause answers the generations in flight with
// finish_reason "abort" and the tokens their latency had produced; at zero
// Options.TokenLatency a generation finishes before an abort can reach it.
//
// # Load
//
// Options.TokenLatency makes replies take time in proportion to their length
// and Options.MaxConcurrent caps the replies generated at once, so that
// routing and back-pressure can be exercised without a GPU. At zero latency
// a reply costs a few microseconds of CPU besides HTTP and JSON.
//
// Options.KVCacheTokens gives the server vLLM's automatic prefix cache: a
// KV cache of that many tokens in blocks of Options.BlockSize (16), full
// blocks cached under a hash of their whole prefix, least recently used
// free blocks evicted (see prefixCache). Options.PrefillLatency charges each
// prompt token the cache did not hold, before the generated tokens'
// TokenLatency: a request takes (prompt - hit) × PrefillLatency +
// generated × TokenLatency inside its slot, whatever else runs (no batching
// is modelled). So a multi-turn episode whose turns return to the server
// holding its conversation prefills only each turn's new tokens, and
// /metrics shows vLLM's vllm:prefix_cache_queries_total and
// vllm:prefix_cache_hits_total (in tokens) and KV-cache usage as the blocks
// held by running requests. /pause empties the cache unless given
// clear_cache=false, as vLLM's does.
package toyllm
