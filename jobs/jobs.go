// Package jobs makes the episodes of a rollout job from its description
// (env ids taken in turn, dataset rows, n samples per prompt, sampling,
// seeds) one at a time, so a job of any size holds none of them: the
// episodes `rollout run` submits and those of a trainer's batch spec are
// made by the same Plan.
package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rollfleet/rollfleet/envs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/nemogym"
	"github.com/rollfleet/rollfleet/remoteenv"
)

// Options describes a job's episodes. Zero values take the defaults noted.
// Error messages name rollout run's flags.
type Options struct {
	// RunID names the run (default: a fresh NewRunID).
	RunID string
	// Env is the env id, or a comma-separated list of ids and patterns such
	// as "game:*", used in turn by prompts whose dataset row names none.
	Env string
	// Episodes is the number of episodes (n samples per prompt count
	// separately). With dataset rows, 0 means every row once.
	Episodes int
	// Dataset names the rows' file in error messages.
	Dataset string
	// NSamples is the number of samples per prompt, the size of each group
	// (default 1).
	NSamples int
	// ObsStyle is the observation style of rows that name none
	// (messages.ObsChat when empty).
	ObsStyle string
	// ApplyChatTemplate wraps dataset prompts as the first user turn.
	ApplyChatTemplate bool
	// ChatTemplateName and ChatTemplateKwargs are every episode's
	// (messages.EpisodeRequest): empty is the model's own template.
	ChatTemplateName   string
	ChatTemplateKwargs []byte
	// PromptOverflow is messages.PromptOverflowFail (empty) or
	// messages.PromptOverflowTruncateLeft.
	PromptOverflow string
	// MaxLength is the whole-trajectory token budget (default 4096).
	MaxLength int
	// MaxTokens caps each turn's generation (0: the remaining budget).
	MaxTokens int
	// MaxStaleness and StalePolicy are every episode's staleness bound and
	// policy (nil and empty: the env workers').
	MaxStaleness *int32
	StalePolicy  string
	// Temperature (default 1) and TopP (default 1) are the sampling
	// settings of rows that set none.
	Temperature, TopP float64
	// Seed makes the episodes reproducible (default: a random one).
	Seed *uint64
	// MathJudge and MathStrict are the env options of math episodes: ask
	// the judge about rejected answers, grade strictly.
	MathJudge, MathStrict bool
	// Remote lists the envs hosted over HTTP, which rows may name besides
	// the registered envs.
	Remote []remoteenv.Config
}

func (o *Options) setDefaults() {
	if o.NSamples <= 0 {
		o.NSamples = 1
	}
	if o.MaxLength <= 0 {
		o.MaxLength = 4096
	}
	if o.Temperature == 0 {
		o.Temperature = 1
	}
	if o.TopP == 0 {
		o.TopP = 1
	}
	if o.Seed == nil {
		s := rand.Uint64()
		o.Seed = &s
	}
}

// DatasetRow is one line of a dataset file: a prompt row, a math
// question/answer row, or a NeMo Gym data item (see UnmarshalJSON).
type DatasetRow struct {
	Prompt   string `json:"prompt"`
	Label    string `json:"label"`
	Env      string `json:"env,omitempty"`
	ObsStyle string `json:"obs_style,omitempty"`
	// Messages are a NeMo Gym item's input messages, the first prompt.
	Messages []messages.ChatMessage `json:"messages,omitempty"`
	// Sampling overrides of a NeMo Gym item; nil keeps the run's.
	Temperature, TopP *float64 `json:"-"`
	MaxTokens         *int32   `json:"-"`
	// Line is the row's line number in its file (from 1), set by
	// ParseDataset; errors about the row name it.
	Line int `json:"-"`
	// Raw is the row as read (a copy), for NeMo Gym's task numbering and
	// records.
	Raw json.RawMessage `json:"-"`
	// TaskIndex is the row's own _ng_task_index, when it has one.
	TaskIndex *int32 `json:"-"`
}

// UnmarshalJSON reads the three row forms. A NeMo Gym item
// (responses_create_params present) plays env "math:nemo" unless it names an
// env: its input messages are the first prompt, its question the prompt, its
// expected_answer the label, and its sampling fields override the run's. A
// row with question and expected_answer plays env "math". Any other row is
// {"prompt", "label", "env"?}, whose env may come from the run.
func (r *DatasetRow) UnmarshalJSON(data []byte) error {
	type plain DatasetRow
	var raw struct {
		plain
		CreateParams   *nemogym.CreateParams `json:"responses_create_params"`
		Question       *string               `json:"question"`
		ExpectedAnswer *string               `json:"expected_answer"`
		TaskIndex      *int32                `json:"_ng_task_index"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw.TaskIndex != nil && *raw.TaskIndex < 0 {
		return fmt.Errorf("_ng_task_index %d is negative", *raw.TaskIndex)
	}
	line := r.Line
	*r = DatasetRow(raw.plain)
	r.Line, r.TaskIndex = line, raw.TaskIndex
	r.Raw = append(json.RawMessage(nil), bytes.TrimSpace(data)...)
	switch {
	case raw.CreateParams != nil:
		item := nemogym.Item{CreateParams: *raw.CreateParams}
		if raw.Question != nil {
			item.Question = *raw.Question
		}
		q, err := item.UserQuestion()
		if err != nil {
			return err
		}
		r.Prompt, r.Messages = q, nil
		for _, m := range item.CreateParams.Input {
			r.Messages = append(r.Messages, messages.ChatMessage{Role: m.Role, Content: m.Content})
		}
		r.Temperature, r.TopP, r.MaxTokens = item.CreateParams.Temperature, item.CreateParams.TopP, item.CreateParams.MaxOutputTokens
		r.defaultEnv("math:nemo")
	case raw.Question != nil || raw.ExpectedAnswer != nil:
		if raw.Question == nil || *raw.Question == "" {
			return errors.New("math row without question")
		}
		r.Prompt = *raw.Question
		r.defaultEnv("math")
	default:
		return nil
	}
	if raw.ExpectedAnswer == nil {
		return errors.New("math row without expected_answer")
	}
	r.Label = *raw.ExpectedAnswer
	return nil
}

func (r *DatasetRow) defaultEnv(id string) {
	if r.Env == "" {
		r.Env = id
	}
}

// mix derives an independent 64-bit value from a seed and an index.
func mix(seed uint64, i int) uint64 {
	h := fnv.New64a()
	var b [16]byte
	for k := range 8 {
		b[k] = byte(seed >> (8 * k))
		b[8+k] = byte(uint64(i) >> (8 * k))
	}
	h.Write(b[:])
	return h.Sum64()
}

// Plan is a job's episodes, made one at a time from its options. Its
// methods are safe for concurrent use.
type Plan struct {
	opts   Options
	runID  string
	rows   []DatasetRow
	envIDs []string // Env's ids, taken in turn by prompts without an env
	groups int
	// tasks numbers the rows as NeMo Gym does (taskNumbers); prior is how
	// many rows before each one have its task, and perTask how many rows
	// each task has.
	tasks, prior []int32
	perTask      map[int32]int32
	now          int64 // submit time of every episode
	// version is the fleet's policy version as the episodes are made: each
	// records the one of its submission.
	version atomic.Int64
}

// Len is the number of episodes.
func (p *Plan) Len() int { return p.groups * p.opts.NSamples }

// Groups is the number of groups (prompts); each has NSamples episodes.
func (p *Plan) Groups() int { return p.groups }

// NSamples is the size of each group.
func (p *Plan) NSamples() int { return p.opts.NSamples }

// RunID is the run id every episode carries.
func (p *Plan) RunID() string { return p.runID }

// SetVersion sets the policy version the episodes made from now on record
// as their submission's.
func (p *Plan) SetVersion(v int64) { p.version.Store(v) }

// New checks a job's inputs and makes every episode once to check it, and
// returns its plan. rows are the dataset's rows (nil: the env's own
// instructions as the prompt).
func New(opts Options, rows []DatasetRow) (*Plan, error) {
	opts.setDefaults()
	p := &Plan{opts: opts, runID: opts.RunID, rows: rows, now: time.Now().UnixNano()}
	if err := checkRowEnvs(opts, p.rows); err != nil {
		return nil, err
	}
	p.tasks = taskNumbers(rows)
	p.prior, p.perTask = make([]int32, len(rows)), map[int32]int32{}
	for r, t := range p.tasks {
		p.prior[r] = p.perTask[t]
		p.perTask[t]++
	}
	n := opts.NSamples
	p.groups = len(p.rows)
	switch {
	case opts.Episodes > 0:
		if opts.Episodes%n != 0 {
			return nil, fmt.Errorf("jobs: --episodes %d is not a multiple of --n-samples %d", opts.Episodes, n)
		}
		p.groups = opts.Episodes / n
	case len(p.rows) == 0:
		return nil, errors.New("jobs: nothing to run: give --episodes or --dataset")
	}
	if p.runID == "" {
		p.runID = NewRunID()
	}
	if opts.Env != "" {
		var err error
		if p.envIDs, err = remoteenv.Match(opts.Env, opts.Remote); err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
	}
	for i := range p.Len() {
		r, err := p.Request(i)
		if err != nil {
			return nil, err
		}
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
	}
	return p, nil
}

// NewRunID returns a fresh run id: short, random, usable in subjects and
// file names as it is.
func NewRunID() string {
	return strconv.FormatUint(rand.Uint64()>>1, 36)
}

// EpisodeID is the id of a run's episode number i.
func EpisodeID(run string, i int) string { return fmt.Sprintf("%s-%06d", run, i) }

// GroupID is the id of a run's group number g.
func GroupID(run string, g int) string { return fmt.Sprintf("%s-g%06d", run, g) }

// taskNumbers numbers dataset rows as NeMo Gym's rollout collection does:
// a row's own _ng_task_index, else identical rows (the same text) alike, in
// order of first appearance, counting from 0 (the rows with an index of
// their own do not take a number).
func taskNumbers(rows []DatasetRow) []int32 {
	tasks := make([]int32, len(rows))
	seen := map[string]int32{}
	for r, row := range rows {
		if row.TaskIndex != nil {
			tasks[r] = *row.TaskIndex
			continue
		}
		key := string(row.Raw)
		if row.Raw == nil {
			key = fmt.Sprintf("row %d", r) // made in code, not read: its own
		}
		t, ok := seen[key]
		if !ok {
			t = int32(len(seen))
			seen[key] = t
		}
		tasks[r] = t
	}
	return tasks
}

// indices returns the NeMo Gym task and rollout index of episode idx. The
// rows are used in turn, each for NSamples episodes, and a task's rollouts
// are numbered in that order, as NeMo Gym's repeats are (aabbcc): no two
// episodes share a (task, rollout) pair, however often rows recur. Without a
// dataset every group is a task of its own.
func (p *Plan) indices(idx int) (task, rollout int32) {
	n := p.opts.NSamples
	g, i := idx/n, idx%n
	if len(p.rows) == 0 {
		return int32(g), int32(i)
	}
	r := g % len(p.rows)
	task = p.tasks[r]
	before := int64(g/len(p.rows))*int64(p.perTask[task]) + int64(p.prior[r])
	return task, int32(before*int64(n) + int64(i))
}

// Row is the dataset row of episode idx (the zero row without a dataset).
func (p *Plan) Row(idx int) DatasetRow {
	if len(p.rows) == 0 {
		return DatasetRow{}
	}
	return p.rows[(idx/p.opts.NSamples)%len(p.rows)]
}

// Request makes episode number idx (0 ≤ idx < Len), a fresh value the
// caller may change. Its SubmitTime is the time New was called.
func (p *Plan) Request(idx int) (*messages.EpisodeRequest, error) {
	if idx < 0 || idx >= p.Len() {
		return nil, fmt.Errorf("jobs: episode %d of %d", idx, p.Len())
	}
	opts := p.opts
	n := opts.NSamples
	g, i := idx/n, idx%n
	row := p.Row(idx)
	if row.Env == "" && len(p.envIDs) > 0 {
		row.Env = p.envIDs[g%len(p.envIDs)]
	}
	if row.Env == "" {
		if len(p.rows) > 0 {
			return nil, fmt.Errorf("jobs: dataset %s line %d names no env and no --env is given", opts.Dataset, row.Line)
		}
		return nil, errors.New("jobs: no env: give --env")
	}
	// The n samples of a group share the prompt and so the game instance.
	envSeed := mix(*opts.Seed, 2*g)
	sampleSeed := int64(mix(*opts.Seed, 2*idx+1) >> 1)
	sp := messages.SamplingParams{
		Temperature: opts.Temperature, TopP: opts.TopP, MaxTokens: int32(opts.MaxTokens), Seed: &sampleSeed,
	}
	if row.Temperature != nil {
		sp.Temperature = *row.Temperature
	}
	if row.TopP != nil {
		sp.TopP = *row.TopP
	}
	if row.MaxTokens != nil {
		sp.MaxTokens = *row.MaxTokens
	}
	style := row.ObsStyle
	if style == "" {
		style = opts.ObsStyle
	}
	task, rollout := p.indices(idx)
	var envOpts []byte
	if spec, err := envs.Lookup(row.Env); err == nil && spec.Family == envs.MathFamily {
		envOpts = mathEnvOptions(opts.MathJudge, opts.MathStrict)
	}
	return &messages.EpisodeRequest{
		EnvOptions: envOpts,
		V:          messages.Version, RunID: p.runID, EpisodeID: EpisodeID(p.runID, idx),
		GroupID: GroupID(p.runID, g), SampleIndex: int32(i), GroupSize: int32(n),
		Env: row.Env, EnvSeed: &envSeed, Prompt: row.Prompt, ChatTemplate: opts.ApplyChatTemplate && row.Prompt != "",
		Label: row.Label, Messages: row.Messages, ObsStyle: style, TaskIndex: task, RolloutIndex: rollout,
		ChatTemplateName: opts.ChatTemplateName, ChatTemplateKwargs: opts.ChatTemplateKwargs,
		Sampling: sp, MaxLength: int32(opts.MaxLength), SubmitTime: p.now, PromptOverflow: opts.PromptOverflow,
		SubmitVersion: p.version.Load(), MaxStaleness: opts.MaxStaleness, StalePolicy: opts.StalePolicy,
		TraceID: messages.TraceIDOf(p.runID, EpisodeID(p.runID, idx)),
	}, nil
}

// checkRowEnvs checks that every env a dataset row names is known
// (registered, or one of the run's remote envs); the error names the first
// row that names an unknown one, by line.
func checkRowEnvs(opts Options, rows []DatasetRow) error {
	var bad []DatasetRow
	var first error
	for _, row := range rows {
		if row.Env == "" || slices.ContainsFunc(opts.Remote, func(c remoteenv.Config) bool { return c.ID == row.Env }) {
			continue
		}
		if _, err := envs.Lookup(row.Env); err != nil {
			if first == nil {
				first = err
			}
			bad = append(bad, row)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	switch len(bad) {
	case 1:
	case 2:
		more = fmt.Sprintf(" (and line %d)", bad[1].Line)
	default:
		more = fmt.Sprintf(" (and %d more rows, the next at line %d)", len(bad)-1, bad[1].Line)
	}
	return fmt.Errorf("jobs: dataset %s line %d%s: %w", opts.Dataset, bad[0].Line, more, first)
}

// ReadDataset reads a JSONL dataset file; every bad line is reported with
// its number.
func ReadDataset(path string) ([]DatasetRow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jobs: dataset: %w", err)
	}
	rows, err := ParseDataset(data)
	if err != nil {
		return nil, fmt.Errorf("jobs: dataset %s: %w", path, err)
	}
	return rows, nil
}

// ParseDataset parses JSONL dataset rows; blank lines are skipped.
func ParseDataset(data []byte) ([]DatasetRow, error) {
	var rows []DatasetRow
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r := DatasetRow{Line: i + 1}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("no rows")
	}
	return rows, nil
}

// mathEnvOptions are the env options of a math episode: whether its rejected
// answers go to the judge, and whether it is graded strictly; nil for none.
func mathEnvOptions(judge, strict bool) []byte {
	switch {
	case judge && strict:
		return []byte(`{"judge":true,"strict":true}`)
	case judge:
		return []byte(`{"judge":true}`)
	case strict:
		return []byte(`{"strict":true}`)
	}
	return nil
}

// EpisodeIndex returns the number of one of run's episodes, from its id.
func EpisodeIndex(run, id string) (int, bool) {
	return index(id, run+"-", func(i int) string { return EpisodeID(run, i) })
}

// GroupIndex returns the number of one of run's groups, from its id.
func GroupIndex(run, id string) (int, bool) {
	return index(id, run+"-g", func(i int) string { return GroupID(run, i) })
}

// index reads the number of an id made by format: prefix, then the number
// as format writes it, and nothing else.
func index(id, prefix string, format func(int) string) (int, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil && i >= 0 && format(i) == id
}
