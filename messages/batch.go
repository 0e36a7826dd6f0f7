package messages

// BatchManifest records what a trainer submitted as one batch: the episodes, groups and
// samples per group to expect, so that a trainer restarted mid-batch knows when the batch is
// complete. It is the last message on Subjects.Batch(BatchID), kept by the batches stream.
// A batch's id is the RunID of its episodes.
type BatchManifest struct {
	V uint8 `msgpack:"v" json:"-"`
	// BatchID is the batch's id, the RunID of every episode in it.
	BatchID string `msgpack:"id" json:"batch_id"`
	// Env is the env id, or the comma-separated ids, of the batch's episodes.
	Env string `msgpack:"e,omitempty" json:"env,omitempty"`
	// Episodes and Groups count the batch's episodes and groups; N is the samples per group
	// when every group has the same size, else 0.
	Episodes int32 `msgpack:"ep" json:"episodes"`
	Groups   int32 `msgpack:"g" json:"groups"`
	N        int32 `msgpack:"n,omitempty" json:"n,omitempty"`
	// SubmitTime is when the batch was submitted (unix nanoseconds); SubmitVersion the policy
	// version current then.
	SubmitTime    int64 `msgpack:"ts" json:"submit_time_ns"`
	SubmitVersion int64 `msgpack:"sv,omitempty" json:"submit_version"`
}

// Validate checks a batch manifest: V == Version; batch_id a valid id; at least one episode and
// one group, no more groups than episodes; n and the submit version ≥ 0.
func (b *BatchManifest) Validate() error { return asError(b.validate().in("BatchManifest")) }

func (b *BatchManifest) validate() *ValidationError {
	var groups *ValidationError
	if b.Groups > b.Episodes {
		groups = invalid("groups", "%d groups for %d episodes", b.Groups, b.Episodes)
	}
	return first(
		checkVersion(b.V),
		checkID("batch_id", b.BatchID),
		checkPositive("episodes", b.Episodes),
		checkPositive("groups", b.Groups),
		groups,
		checkNonNegative("n", b.N),
		checkNonNegative64("submit_version", b.SubmitVersion),
	)
}
