package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// Batch is what Submit submits: explicit Requests, a Spec or a Plan.
type Batch struct {
	// ID names the batch; it becomes the RunID of every episode. Empty
	// draws a fresh one (jobs.NewRunID).
	ID string
	// Requests are the batch's episodes as they are. Their RunID,
	// SubmitTime and SubmitVersion are set by Submit; their episode ids must
	// be unique, and each group's GroupSize must count its members.
	Requests []*messages.EpisodeRequest
	// Spec makes the batch's episodes as rollout run makes its own, when
	// Requests is empty.
	Spec *Spec
	// Plan is a batch's episodes made one at a time, as rollout run submits
	// its jobs, when Requests and Spec are empty; the plan's run id must be
	// the batch's.
	Plan *jobs.Plan
	// Skip, when set, names episodes (by number) not to submit: those a
	// resumed job has already.
	Skip func(i int) bool
	// Window, when positive, bounds the episodes submitted and not yet
	// decided: before episode Window+k is published, Submit calls
	// Decided(ctx, k+1), which returns once k+1 of them are decided (by the
	// caller's own reading of the batch's records, Consume). A job of any
	// size then holds only what is in flight, and one whose outcomes cannot
	// be stored stops submitting instead of queueing more work.
	Window  int
	Decided func(ctx context.Context, n int64) error
	// Unlisted submits without storing a manifest or making consumers: the
	// batch is not listed by Batches and Status, and its records are read
	// with Consume only, which makes the consumer of each kind read on the
	// streams the caller made (start it before submitting: SubmitBatch does
	// not check the streams of an unlisted batch). rollout run's jobs are
	// unlisted; they keep their own manifest for --resume.
	Unlisted bool
}

// Spec describes a batch's episodes as rollout run's flags describe a job's
// (see fleet.Options). Zero values take the defaults noted.
type Spec struct {
	// Env is an env id, or a comma-separated list of ids and patterns
	// ("game:*") taken in turn by prompts whose row names no env.
	Env string `json:"env,omitempty"`
	// Episodes is the number of episodes, a multiple of N; with Rows, 0
	// means every row once (N episodes each).
	Episodes int `json:"episodes,omitempty"`
	// Rows are dataset rows, as lines of rollout run's --dataset.
	Rows []jobs.DatasetRow `json:"rows,omitempty"`
	// N is the samples per prompt, the size of each group (default 1).
	N int `json:"n,omitempty"`
	// Sampling holds the sampling parameters.
	Sampling Sampling `json:"sampling"`
	// MaxLength is the whole-trajectory token budget (default 4096).
	MaxLength int `json:"max_length,omitempty"`
	// MaxTurns caps the turns of an episode (0: the env's default).
	MaxTurns int `json:"max_turns,omitempty"`
	// ObsStyle is the observation style of rows that name none
	// (messages.ObsChat when empty).
	ObsStyle string `json:"obs_style,omitempty"`
	// ApplyChatTemplate wraps row prompts as the first user turn.
	ApplyChatTemplate bool `json:"apply_chat_template,omitempty"`
	// ChatTemplate is empty or "model" for the model's own chat template, or "chatml";
	// ChatTemplateKwargs a JSON object of extra template variables.
	ChatTemplate       string          `json:"chat_template,omitempty"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
	// PromptOverflow is messages.PromptOverflowFail (empty) or
	// PromptOverflowTruncateLeft.
	PromptOverflow string `json:"prompt_overflow,omitempty"`
	// MaxStaleness bounds how far the policy may move on during an
	// episode; nil takes the env workers' default, negative is unbounded.
	MaxStaleness *int32 `json:"max_staleness,omitempty"`
	// StalePolicy is messages.StaleDrop, StaleRestart or StaleKeep (empty:
	// the env workers' default).
	StalePolicy string `json:"stale_policy,omitempty"`
	// Seed makes the batch reproducible; nil draws one.
	Seed *uint64 `json:"seed,omitempty"`
}

// Sampling holds a batch's sampling parameters; nil takes the default.
// A row's own sampling fields (a NeMo Gym item's) take precedence.
type Sampling struct {
	// Temperature defaults to 1; 0 samples greedily.
	Temperature *float64 `json:"temperature,omitempty"`
	// TopP defaults to 1.
	TopP *float64 `json:"top_p,omitempty"`
	// MaxTokens caps each turn's generation; 0 (the default) leaves each
	// turn the whole remaining budget.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// Submitted describes a submitted batch.
type Submitted struct {
	// Manifest is the batch's stored manifest.
	Manifest messages.BatchManifest
	// Resubmitted reports that the batch had been submitted before: its
	// episodes were submitted again, which JetStream's message ids make
	// harmless within the duplicate window.
	Resubmitted bool
}

// publishWindow is how many episodes are published before their
// acknowledgements are awaited.
const publishWindow = 256

// Submit submits a batch and returns its id. It stores the batch's manifest
// (unless the batch is Unlisted), makes the consumers its results are read
// through, and publishes every
// episode with a message id, so submitting the same batch again stores
// nothing twice. See SubmitBatch for the manifest.
func (c *Client) Submit(ctx context.Context, b Batch) (string, error) {
	s, err := c.SubmitBatch(ctx, b)
	return s.Manifest.BatchID, err
}

// SubmitBatch is Submit, returning the batch's manifest.
func (c *Client) SubmitBatch(ctx context.Context, b Batch) (Submitted, error) {
	if b.ID == "" {
		b.ID = jobs.NewRunID()
	}
	// An unlisted batch's id names no manifest subject of its own and its
	// consumers escape it: any run id rollout run takes will do.
	if !b.Unlisted {
		if err := checkBatchID(b.ID); err != nil {
			return Submitted{}, err
		}
	}
	reqs, man, err := c.requests(b)
	if err != nil {
		return Submitted{}, err
	}
	if !b.Unlisted {
		if err := c.ensureStreams(ctx); err != nil {
			return Submitted{}, err
		}
	}
	st, err := c.State(ctx)
	if err != nil {
		return Submitted{}, err
	}
	man.SubmitTime, man.SubmitVersion = time.Now().UnixNano(), st.Version
	out := Submitted{Manifest: man}
	if !b.Unlisted {
		if out, err = c.storeManifest(ctx, man); err != nil {
			return out, err
		}
	}
	if !b.Unlisted {
		if err := c.ensureConsumers(ctx, b.ID); err != nil {
			return out, err
		}
	}
	if err := c.publish(ctx, b, reqs, out.Manifest); err != nil {
		return out, err
	}
	c.log.Info("batch submitted", "batch", b.ID, "episodes", man.Episodes, "groups", man.Groups, "version", out.Manifest.SubmitVersion, "resubmitted", out.Resubmitted)
	return out, nil
}

// storeManifest stores a batch's manifest, unless one of the same batch is
// stored already (a resubmission), which it returns instead.
func (c *Client) storeManifest(ctx context.Context, man messages.BatchManifest) (Submitted, error) {
	out := Submitted{Manifest: man}
	prev, err := c.Manifest(ctx, man.BatchID)
	switch {
	case errors.Is(err, ErrUnknownBatch):
		data, err := messages.Marshal(&man)
		if err != nil {
			return out, fmt.Errorf("trainer: manifest: %w", err)
		}
		if err := bus.Publish(ctx, c.js, c.subj.Batch(man.BatchID), data, ""); err != nil {
			return out, fmt.Errorf("trainer: store manifest of batch %s: %w", man.BatchID, err)
		}
		return out, nil
	case err != nil:
		return out, err
	case prev.Episodes != man.Episodes || prev.Groups != man.Groups || prev.N != man.N:
		return out, fmt.Errorf("%w: %s has %d episodes in %d groups, not %d in %d", ErrBatchExists, man.BatchID, prev.Episodes, prev.Groups, man.Episodes, man.Groups)
	}
	return Submitted{Manifest: prev, Resubmitted: true}, nil
}

// publish publishes a batch's episodes, publishWindow at a time, the
// skipped ones left out, paced by the batch's Window.
func (c *Client) publish(ctx context.Context, b Batch, reqs *batchRequests, man messages.BatchManifest) error {
	chunk := make([]int, 0, publishWindow)
	flush := func() error {
		err := c.publishEpisodes(ctx, reqs, chunk, man)
		chunk = chunk[:0]
		return err
	}
	var submitted int64
	for i := range reqs.len() {
		if b.Skip != nil && b.Skip(i) {
			continue
		}
		if need := submitted + 1 - int64(b.Window); b.Window > 0 && b.Decided != nil && need > 0 {
			if err := flush(); err != nil {
				return err
			}
			if err := b.Decided(ctx, need); err != nil {
				return err
			}
		}
		chunk = append(chunk, i)
		submitted++
		if len(chunk) == publishWindow {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// checkBatchID checks a batch id: a valid id that names its consumers as it is.
func checkBatchID(id string) error {
	if len(id) > 32 || messages.NameToken(id) != id {
		return fmt.Errorf("%w: id %q: at most 32 printable ASCII characters, without '.', '*', '>', '%%', '/' or '\\'", ErrBadBatch, id)
	}
	return nil
}

// ensureStreams creates the fleet's streams that are missing, the batches
// stream among them (on a fleet made before it existed, say).
func (c *Client) ensureStreams(ctx context.Context) error {
	opts := c.opts.Streams
	opts.Batches = true
	err := bus.EnsureStreams(ctx, c.js, c.subj, opts)
	if errors.Is(err, bus.ErrStreamMismatch) {
		c.log.Warn("streams left as they are", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("trainer: %w", err)
	}
	return nil
}

// batchRequests yields a batch's requests, explicit or made by a plan.
type batchRequests struct {
	explicit []*messages.EpisodeRequest
	plan     *jobs.Plan
	spec     *Spec
}

func (r *batchRequests) len() int {
	if r.plan != nil {
		return r.plan.Len()
	}
	return len(r.explicit)
}

// request returns episode i, with the spec's settings that the plan does
// not make applied.
func (r *batchRequests) request(i int) (*messages.EpisodeRequest, error) {
	if r.plan == nil {
		q := *r.explicit[i]
		return &q, nil
	}
	q, err := r.plan.Request(i)
	if err != nil {
		return nil, err
	}
	s := r.spec
	if s == nil {
		return q, nil
	}
	row := r.plan.Row(i)
	if t := s.Sampling.Temperature; t != nil && row.Temperature == nil {
		q.Sampling.Temperature = *t
	}
	q.MaxTurns, q.MaxStaleness, q.StalePolicy = int32(s.MaxTurns), s.MaxStaleness, s.StalePolicy
	return q, nil
}

// requests checks a batch and returns its requests and manifest (without
// its submit time and version).
func (c *Client) requests(b Batch) (*batchRequests, messages.BatchManifest, error) {
	man := messages.BatchManifest{V: messages.Version, BatchID: b.ID}
	given := 0
	for _, ok := range []bool{len(b.Requests) > 0, b.Spec != nil, b.Plan != nil} {
		if ok {
			given++
		}
	}
	switch {
	case given > 1:
		return nil, man, fmt.Errorf("%w: give requests, a spec or a plan, not more than one", ErrBadBatch)
	case len(b.Requests) > 0:
		return c.explicitRequests(b, man)
	case b.Plan != nil:
		if id := b.Plan.RunID(); id != b.ID {
			return nil, man, fmt.Errorf("%w: the plan makes episodes of run %s, not of batch %s", ErrBadBatch, id, b.ID)
		}
		man.Episodes, man.Groups, man.N = int32(b.Plan.Len()), int32(b.Plan.Groups()), int32(b.Plan.NSamples())
		return &batchRequests{plan: b.Plan}, man, nil
	case b.Spec == nil:
		return nil, man, fmt.Errorf("%w: no requests, spec or plan", ErrBadBatch)
	}
	s := b.Spec
	if err := c.checkSpec(s); err != nil {
		return nil, man, err
	}
	opts := jobs.Options{
		Env: s.Env, Episodes: s.Episodes, NSamples: max(s.N, 1), MaxLength: s.MaxLength, MaxTokens: s.Sampling.MaxTokens,
		ObsStyle: s.ObsStyle, ApplyChatTemplate: s.ApplyChatTemplate, PromptOverflow: s.PromptOverflow,
		ChatTemplateName: s.templateName(), ChatTemplateKwargs: s.templateKwargs(),
		Seed: s.Seed, Remote: c.opts.Remote, RunID: b.ID,
	}
	if t := s.Sampling.Temperature; t != nil && *t != 0 {
		opts.Temperature = *t
	}
	if p := s.Sampling.TopP; p != nil {
		opts.TopP = *p
	}
	plan, err := jobs.New(opts, s.Rows)
	if err != nil {
		return nil, man, fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	r := &batchRequests{plan: plan, spec: s}
	// Every request is checked before anything is submitted.
	for i := range r.len() {
		q, err := r.request(i)
		if err == nil {
			err = q.Validate()
		}
		if err != nil {
			return nil, man, fmt.Errorf("%w: episode %d: %w", ErrBadBatch, i, err)
		}
	}
	man.Env, man.Episodes, man.Groups, man.N = s.Env, int32(plan.Len()), int32(plan.Groups()), int32(max(s.N, 1))
	if man.Env == "" {
		man.Env = rowEnvs(s.Rows)
	}
	return r, man, nil
}

// checkSpec checks what jobs.New would report in terms of rollout run's
// flags, naming the spec's fields instead.
func (c *Client) checkSpec(s *Spec) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadBatch, fmt.Sprintf(format, args...))
	}
	n := max(s.N, 1)
	switch {
	case s.N < 0:
		return bad("n %d is negative", s.N)
	case s.Episodes < 0:
		return bad("episodes %d is negative", s.Episodes)
	case s.Episodes%n != 0:
		return bad("episodes %d is not a multiple of n %d", s.Episodes, n)
	case s.Episodes == 0 && len(s.Rows) == 0:
		return bad("nothing to run: give episodes or rows")
	case s.MaxLength < 0:
		return bad("max_length %d is negative", s.MaxLength)
	case s.MaxTurns < 0:
		return bad("max_turns %d is negative", s.MaxTurns)
	case s.Sampling.MaxTokens < 0:
		return bad("sampling.max_tokens %d is negative", s.Sampling.MaxTokens)
	case s.Sampling.Temperature != nil && *s.Sampling.Temperature < 0:
		return bad("sampling.temperature %v is negative", *s.Sampling.Temperature)
	case s.Sampling.TopP != nil && (*s.Sampling.TopP <= 0 || *s.Sampling.TopP > 1):
		return bad("sampling.top_p %v is not in (0, 1]", *s.Sampling.TopP)
	}
	for _, check := range []struct {
		field, v string
		allowed  []string
	}{
		{"obs_style", s.ObsStyle, messages.ObsStyles},
		{"stale_policy", s.StalePolicy, messages.StalePolicies},
		{"prompt_overflow", s.PromptOverflow, messages.PromptOverflows},
		{"chat_template", s.ChatTemplate, []string{"model", messages.TemplateChatML}},
	} {
		if check.v != "" && !contains(check.allowed, check.v) {
			return bad("%s %q is not one of %s", check.field, check.v, strings.Join(check.allowed, ", "))
		}
	}
	if kw := s.templateKwargs(); kw != nil && !messages.IsJSONObject(kw) {
		return bad("chat_template_kwargs must be a JSON object")
	}
	if s.Env != "" {
		if _, err := remoteenv.Match(s.Env, c.opts.Remote); err != nil {
			return bad("env: %v", err)
		}
	}
	for i, row := range s.Rows {
		switch {
		case row.Env == "" && s.Env == "":
			return bad("rows[%d] names no env and the batch gives none", i)
		case row.Env != "" && !c.remote(row.Env):
			if _, err := envs.Lookup(row.Env); err != nil {
				return bad("rows[%d].env: %v", i, err)
			}
		}
		if row.ObsStyle != "" && !contains(messages.ObsStyles, row.ObsStyle) {
			return bad("rows[%d].obs_style %q is not one of %s", i, row.ObsStyle, strings.Join(messages.ObsStyles, ", "))
		}
	}
	return nil
}

func (c *Client) remote(id string) bool {
	for _, r := range c.opts.Remote {
		if r.ID == id {
			return true
		}
	}
	return false
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// rowEnvs lists the distinct envs rows name, comma-separated.
func rowEnvs(rows []jobs.DatasetRow) string {
	var ids []string
	for _, r := range rows {
		if r.Env != "" && !contains(ids, r.Env) {
			ids = append(ids, r.Env)
		}
	}
	return strings.Join(ids, ",")
}

// explicitRequests checks a batch of explicit requests.
func (c *Client) explicitRequests(b Batch, man messages.BatchManifest) (*batchRequests, messages.BatchManifest, error) {
	episodes := make(map[string]bool, len(b.Requests))
	groups := map[string]int32{}
	var envIDs []string
	n := int32(-1)
	for i, q := range b.Requests {
		if q == nil {
			return nil, man, fmt.Errorf("%w: requests[%d] is nil", ErrBadBatch, i)
		}
		r := *q
		if r.V == 0 {
			r.V = messages.Version
		}
		r.RunID = b.ID
		if err := r.Validate(); err != nil {
			return nil, man, fmt.Errorf("%w: requests[%d]: %w", ErrBadBatch, i, err)
		}
		if episodes[r.EpisodeID] {
			return nil, man, fmt.Errorf("%w: requests[%d]: episode id %q used twice", ErrBadBatch, i, r.EpisodeID)
		}
		episodes[r.EpisodeID] = true
		groups[r.GroupID]++
		if n == -1 {
			n = r.GroupSize
		} else if n != r.GroupSize {
			n = 0
		}
		if !contains(envIDs, r.Env) {
			envIDs = append(envIDs, r.Env)
		}
	}
	for i, q := range b.Requests {
		if groups[q.GroupID] != q.GroupSize {
			return nil, man, fmt.Errorf("%w: requests[%d]: group %q has %d requests, not its group_size %d", ErrBadBatch, i, q.GroupID, groups[q.GroupID], q.GroupSize)
		}
	}
	man.Env, man.Episodes, man.Groups, man.N = strings.Join(envIDs, ","), int32(len(b.Requests)), int32(len(groups)), max(n, 0)
	return &batchRequests{explicit: b.Requests}, man, nil
}

// publishEpisodes publishes the episodes numbered idx and waits for the
// stream to store them; one it refused is published again with
// bus.Publish's retries.
func (c *Client) publishEpisodes(ctx context.Context, reqs *batchRequests, idx []int, man messages.BatchManifest) error {
	type pending struct {
		id  string
		msg *nats.Msg
		ack jetstream.PubAckFuture
	}
	batch := make([]pending, 0, len(idx))
	for _, i := range idx {
		q, err := reqs.request(i)
		if err != nil {
			return fmt.Errorf("%w: episode %d: %w", ErrBadBatch, i, err)
		}
		made := q.SubmitVersion
		q.V, q.RunID, q.SubmitTime, q.SubmitVersion = messages.Version, man.BatchID, man.SubmitTime, man.SubmitVersion
		if reqs.plan != nil {
			// A plan's episode made later than the manifest records the
			// newer version it was made under.
			q.SubmitVersion = max(made, man.SubmitVersion)
		}
		if q.TraceID == "" {
			q.TraceID = messages.TraceIDOf(man.BatchID, q.EpisodeID)
		}
		data, err := messages.Marshal(q)
		if err != nil {
			return fmt.Errorf("trainer: episode %s: %w", q.EpisodeID, err)
		}
		p := pending{id: messages.EpisodeMsgID(q.RunID, q.EpisodeID),
			msg: bus.TracedMsg(c.subj.Episodes(q.RunID, q.Env), data, messages.Traceparent(q.TraceID, messages.NewSpanID()))}
		p.ack, err = c.js.PublishMsgAsync(p.msg, jetstream.WithMsgID(p.id))
		if err != nil {
			// Published again below, with bus.PublishMsg's retries.
			c.log.Debug("episode publish retried", "episode", p.id, "err", err)
			p.ack = nil
		}
		batch = append(batch, p)
	}
	for _, p := range batch {
		var err error
		if p.ack != nil {
			select {
			case <-p.ack.Ok():
				continue
			case err = <-p.ack.Err():
			case <-ctx.Done():
				return fmt.Errorf("trainer: submit: %w", ctx.Err())
			}
			c.log.Debug("episode publish retried", "episode", p.id, "err", err)
		}
		if err := bus.PublishMsg(ctx, c.js, p.msg, p.id); err != nil {
			return fmt.Errorf("trainer: submit episode %s: %w", p.id, err)
		}
	}
	return nil
}

// templateName is the spec's chat template as messages.EpisodeRequest names it.
func (s *Spec) templateName() string {
	if s.ChatTemplate == "model" {
		return ""
	}
	return s.ChatTemplate
}

// templateKwargs is the spec's chat template kwargs, nil for none (null included).
func (s *Spec) templateKwargs() []byte {
	if kw := bytes.TrimSpace(s.ChatTemplateKwargs); len(kw) > 0 && string(kw) != "null" {
		return kw
	}
	return nil
}
