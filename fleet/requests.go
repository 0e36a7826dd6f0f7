package fleet

import (
	"fmt"

	"github.com/rollfleet/rollfleet/messages"
)

// Requests are the episodes of a job as rollout run makes them from its
// options (env ids in turn, dataset rows, n samples per prompt, sampling,
// seeds), made one at a time: a job of any size holds none of them.
type Requests struct{ p *plan }

// NewRequests checks a job's inputs, as Run does before it submits
// anything, and returns its episodes. rows are the dataset's rows (nil: the
// env's own instructions); opts.Dataset is ignored. Zero options take Run's
// defaults; opts.RunID names the run (default: a fresh NewRunID).
func NewRequests(opts Options, rows []DatasetRow) (*Requests, error) {
	opts.Dataset = ""
	opts.setDefaults()
	p, err := newPlanOfRows(opts, rows)
	if err != nil {
		return nil, err
	}
	return &Requests{p: p}, nil
}

// RunID is the run id every request carries.
func (r *Requests) RunID() string { return r.p.runID }

// Len is the number of episodes.
func (r *Requests) Len() int { return r.p.total() }

// Groups is the number of groups (prompts); each has NSamples episodes.
func (r *Requests) Groups() int { return r.p.groups }

// Request makes episode number i (0 ≤ i < Len), a fresh value the caller
// may change. Its SubmitTime is the time NewRequests was called.
func (r *Requests) Request(i int) (*messages.EpisodeRequest, error) {
	if i < 0 || i >= r.Len() {
		return nil, fmt.Errorf("fleet: episode %d of %d", i, r.Len())
	}
	return r.p.request(i)
}

// Row is the dataset row episode i was made from (the zero row without a
// dataset).
func (r *Requests) Row(i int) DatasetRow { return r.p.row(i) }
