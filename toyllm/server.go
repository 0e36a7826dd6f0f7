package toyllm

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollfleet/rollfleet/internal/jsonw"
	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// Defaults of Options.
const (
	// DefaultModel is the served model name when Options.Model is empty.
	DefaultModel = "rollfleet-toy"
	// DefaultMaxModelLen is the context window when Options.MaxModelLen is 0.
	DefaultMaxModelLen = 32768
)

// shutdownGrace is how long in-flight requests may run on after the serving
// context is cancelled, before they are aborted.
const shutdownGrace = 5 * time.Second

// Options configure a Server. The zero value serves DefaultModel with a
// DefaultMaxModelLen context window, no latency, no concurrency cap and no
// prefix cache.
type Options struct {
	// Model is the served model name; requests naming another model get
	// vLLM's 404. Default DefaultModel.
	Model string
	// MaxModelLen is the context window in tokens. Default DefaultMaxModelLen.
	MaxModelLen int
	// TokenLatency is the simulated time per generated token, the decode
	// time (0: none). The wait ends early, with an error, when the
	// request's context ends.
	TokenLatency time.Duration
	// PrefillLatency is the simulated time per prompt token the prefix
	// cache did not hold, the prefill time (0: none), waited before the
	// decode time. Without a cache every prompt token counts.
	PrefillLatency time.Duration
	// KVCacheTokens is the capacity of the server's KV cache in tokens,
	// with vLLM's automatic prefix caching (see prefixCache); 0, or less
	// than a block, disables it.
	KVCacheTokens int
	// BlockSize is the KV cache's block size in tokens. Default
	// DefaultBlockSize.
	BlockSize int
	// MaxConcurrent caps the sequences generating at once (0: unlimited);
	// further requests wait for a slot, as long as their context lasts.
	MaxConcurrent int
	// Record, when set, is called once per successful choice of
	// /v1/completions and /v1/chat/completions (one cut short by an
	// abort-mode pause included, with the tokens it kept) with copies of the
	// prompt and generated token ids, before the response is written and
	// while the request still holds its generation slot. Tests use it to
	// know exactly what was sampled.
	Record func(prompt, generated []int32)
	// Skill is the starting policy's logit for the planned token (see
	// DefaultSkill): higher means fewer slips, a better policy. 0, a
	// negative value or NaN means DefaultSkill; above MaxSkill, MaxSkill.
	// POST /update_weights changes it.
	Skill float64
	// WeightVersion is the starting weight version that GET /weight_info
	// reports. Default DefaultWeightVersion.
	WeightVersion string
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Tokenizer, when set, makes the server speak a real model's
	// vocabulary and chat template instead of the byte-level toy
	// vocabulary (see LoadModelTokenizer and the package doc).
	Tokenizer *ModelTokenizer
	// Reasoning, with a Tokenizer whose chat template leaves thinking to
	// the model (Qwen3's with enable_thinking on, its default), makes a
	// reply to a bare generation prompt open a <think> block itself and
	// reason before its answer or tool call, as such a model does:
	// "<think>\n", the reasoning, "\n</think>\n\n", then the answer.
	// Other templates, and prompts that already open or close the block,
	// are answered as without it.
	Reasoning bool
}

// Server is the stand-in model server. It is safe for concurrent use.
type Server struct {
	opts  Options
	model *ModelTokenizer // Options.Tokenizer
	// reasoning: Options.Reasoning, with a thinking template.
	reasoning bool
	log       *slog.Logger
	handler   http.Handler
	maxBody   int64
	created   int64
	// modelJSON is the model name as a JSON string, written in every
	// response.
	modelJSON []byte

	slots   chan struct{} // nil when unlimited
	cache   *prefixCache  // nil when disabled
	running atomic.Int64
	waiting atomic.Int64
	// runNanos is the time every finished generation spent running, the
	// integral of the running gauge: over a window, its increase divided
	// by the window and MaxConcurrent is the fraction of the server's
	// capacity that was busy.
	runNanos atomic.Int64

	// mu guards gate: pausing, weight updates and the current policy.
	mu   sync.Mutex
	gate gate

	idPrefix uint64
	idSeq    atomic.Uint64
	states   sync.Pool
}

// New returns a Server configured by opts.
func New(opts Options) *Server {
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.MaxModelLen <= 0 {
		opts.MaxModelLen = DefaultMaxModelLen
	}
	opts.TokenLatency = max(opts.TokenLatency, 0)
	opts.PrefillLatency = max(opts.PrefillLatency, 0)
	if opts.BlockSize <= 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Skill = initialSkill(opts.Skill)
	if opts.WeightVersion == "" {
		opts.WeightVersion = DefaultWeightVersion
	}
	s := &Server{
		opts:      opts,
		model:     opts.Tokenizer,
		reasoning: opts.Reasoning && opts.Tokenizer != nil && opts.Tokenizer.thinks,
		log:       opts.Logger,
		// Room for a prompt of the whole context as token ids or escaped
		// text, plus the rest of the request.
		maxBody:   1<<20 + 16*int64(opts.MaxModelLen),
		created:   time.Now().Unix(),
		modelJSON: jsonw.AppendString(nil, opts.Model),
		idPrefix:  rand.Uint64(),
		cache:     newPrefixCache(opts.KVCacheTokens, opts.BlockSize),
	}
	s.states.New = func() any { return new(genState) }
	s.gate.pol = newPolicy(opts.Skill, opts.WeightVersion)
	s.gate.changed = make(chan struct{})
	if opts.MaxConcurrent > 0 {
		s.slots = make(chan struct{}, opts.MaxConcurrent)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("POST /pause", s.handlePause)
	mux.HandleFunc("POST /resume", s.handleResume)
	mux.HandleFunc("GET /is_paused", s.handleIsPaused)
	mux.HandleFunc("POST /update_weights", s.handleUpdateWeights)
	mux.HandleFunc("POST /start_weight_update", s.handleStartWeightUpdate)
	mux.HandleFunc("POST /finish_weight_update", s.handleFinishWeightUpdate)
	mux.HandleFunc("GET /weight_info", s.handleWeightInfo)
	s.handler = mux
	return s
}

// Handler returns the HTTP handler serving vLLM's API.
func (s *Server) Handler() http.Handler { return s.handler }

// Tokenizer returns the byte-level tokenizer of the default mode (a server
// given Options.Tokenizer speaks that one instead).
func (s *Server) Tokenizer() Tokenizer { return Tokenizer{} }

// ListenAndServe serves on addr until ctx is cancelled, then shuts down
// gracefully.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("toyllm: listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is cancelled, then shuts down: it stops
// accepting, lets in-flight requests finish for a grace period, and aborts
// the ones still running after it. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("toyllm: serving", "addr", ln.Addr().String(), "model", s.opts.Model)
	if err := vllmapi.Serve(ctx, ln, s.handler, shutdownGrace, s.log); err != nil {
		return fmt.Errorf("toyllm: serve: %w", err)
	}
	return nil
}

// Start serves on addr (such as "127.0.0.1:0" for a free loopback port) in
// the background. It returns the server's base URL, such as
// "http://127.0.0.1:41234", and stop, which shuts the server down and waits
// until it has; stop may be called more than once. Cancelling ctx also shuts
// the server down.
func (s *Server) Start(ctx context.Context, addr string) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("toyllm: listen on %s: %w", addr, err)
	}
	url, stopServe := vllmapi.Start(ctx, ln, func(ctx context.Context, ln net.Listener) error {
		err := s.Serve(ctx, ln)
		if err != nil {
			s.log.Error("toyllm: stopped", "err", err)
		}
		return err
	})
	// The error has been logged: the callers of Start have no use for it.
	return url, func() { _ = stopServe() }, nil
}

// acquire takes a generation slot, waiting while all are busy.
func (s *Server) acquire(ctx context.Context) error {
	if s.slots != nil {
		select {
		case s.slots <- struct{}{}:
		default:
			s.waiting.Add(1)
			defer s.waiting.Add(-1)
			select {
			case s.slots <- struct{}{}:
			case <-ctx.Done():
				return vllmapi.StatusError(http.StatusServiceUnavailable, "request cancelled while waiting for a generation slot: %w", ctx.Err())
			}
		}
	}
	return nil
}

// release gives back the slot taken by acquire.
func (s *Server) release() {
	if s.slots != nil {
		<-s.slots
	}
}

// run generates the response of one request inside a generation slot, once
// generation is not paused, with the policy current when it starts;
// simulates its latency and reports it to Options.Record. The prompt holds
// its blocks of the prefix cache while it runs; a response that completes
// caches the blocks it filled.
func (s *Server) run(ctx context.Context, st *genState, gp *genParams) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	pol, epoch, err := s.enter(ctx)
	if err != nil {
		return err
	}
	defer s.leave()
	s.running.Add(1)
	begin := time.Now()
	defer func() {
		s.runNanos.Add(int64(time.Since(begin)))
		s.running.Add(-1)
	}()
	cached := s.cache.start(&st.kv, st.prompt)
	generate(st, gp, pol)
	prefill := time.Duration(len(st.prompt)-cached) * s.opts.PrefillLatency
	if prefill > 0 || s.opts.TokenLatency > 0 {
		// One wait for the whole response: nothing is streamed, so the
		// client cannot tell it from a wait per token.
		if err := s.simulateLatency(ctx, st, gp.topN, epoch, begin, prefill); err != nil {
			s.cache.finish(&st.kv, nil)
			return err
		}
	}
	s.cache.finish(&st.kv, st.ids)
	if s.opts.Record != nil {
		s.opts.Record(slices.Clone(st.prompt), slices.Clone(st.ids))
	}
	return nil
}

func (s *Server) getState() *genState { return s.states.Get().(*genState) }

func (s *Server) putState(st *genState) {
	if !st.oversized() {
		s.states.Put(st)
	}
}
