package metrics

import "github.com/prometheus/client_golang/prometheus"

// Reader counts what a reader of one kind of output record (rollout
// consume) takes from its stream. A nil *Reader counts nothing.
type Reader struct {
	read, malformed prometheus.Counter
}

// Reader returns the counters of a reader of kind's records ("groups",
// "trajectories", "failures"), at 0 until it reads; nil for a nil m.
func (m *Metrics) Reader(kind string) *Reader {
	if m == nil {
		return nil
	}
	return &Reader{read: m.recordsRead.WithLabelValues(kind), malformed: m.recordsMalformed.WithLabelValues(kind)}
}

// Read counts n records read and acknowledged.
func (r *Reader) Read(n int) {
	if r != nil {
		r.read.Add(float64(n))
	}
}

// Malformed counts a record that could not be decoded or written.
func (r *Reader) Malformed() {
	if r != nil {
		r.malformed.Inc()
	}
}
