package trainer

import (
	"context"

	"github.com/rollfleet/rollfleet/messages"
)

// Status is the fleet's state as a trainer sees it.
type Status struct {
	// Policy is the fleet's policy state.
	Policy messages.PolicyState `json:"policy"`
	// Workers are the workers that answered.
	Workers []messages.WorkerStatus `json:"workers"`
	// Batches are the batches kept (submitted and not closed), oldest first.
	Batches []BatchStatus `json:"batches"`
}

// BatchStatus is how far one batch is.
type BatchStatus struct {
	// Manifest is the batch's manifest.
	Manifest messages.BatchManifest `json:"manifest"`
	// Progress counts what its readers received. Done means every episode
	// is decided; Pending says which records still wait.
	Progress
	// Pending counts the records of each kind ("group", "trajectory",
	// "failure") waiting for a reader or an acknowledgement.
	Pending map[string]int `json:"pending"`
}

// Status reads the policy state, asks the workers for theirs, and reports
// the progress of every batch kept.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	var err error
	if s.Policy, err = c.State(ctx); err != nil {
		return s, err
	}
	if s.Workers, err = c.Workers(ctx); err != nil {
		return s, err
	}
	mans, err := c.Batches(ctx)
	if err != nil {
		return s, err
	}
	s.Batches = []BatchStatus{}
	for _, m := range mans {
		bp, err := c.batchProgress(ctx, m)
		if err != nil {
			return s, err
		}
		bp.Done = bp.Decided >= bp.Episodes
		s.Batches = append(s.Batches, BatchStatus{Manifest: m, Progress: bp.Progress, Pending: bp.pending})
	}
	return s, nil
}
