package messages

import (
	"fmt"
	"slices"
)

// Settings of PolicyState.OnPause: what a pause does to generations already running on the
// model servers.
const (
	// OnPauseFinish lets generations in flight run to their end; only new ones wait.
	OnPauseFinish = "finish"
	// OnPauseAbort cancels generations in flight; each is sent again, whole, after the resume,
	// so its tokens come from the new weights only.
	OnPauseAbort = "abort"
)

// OnPauses lists the settings of PolicyState.OnPause, the default first.
var OnPauses = []string{OnPauseFinish, OnPauseAbort}

// Settings of EpisodeRequest.StalePolicy: what happens to an episode whose policy moved on by
// more than its max_staleness.
const (
	// StaleDrop ends the episode as a failure of kind FailureStale.
	StaleDrop = "drop"
	// StaleRestart plays the episode again from its start under the current policy; it still
	// has one outcome, which counts the restart.
	StaleRestart = "restart"
	// StaleKeep lets the episode finish and flags its trajectory as stale.
	StaleKeep = "keep"
)

// StalePolicies lists the settings of EpisodeRequest.StalePolicy, the default first.
var StalePolicies = []string{StaleDrop, StaleRestart, StaleKeep}

// Staleness is how far the policy moved on during an episode whose turns had the given
// versions: the newest turn's version minus the first's (0 without turns).
func Staleness(versions []int64) int64 {
	if len(versions) == 0 {
		return 0
	}
	return slices.Max(versions) - versions[0]
}

// PolicyState is the fleet's policy as the trainer announced it: the version of the weights the
// model servers serve and whether generation is paused (while the weights are swapped). It is
// the last message on Subjects.Control, kept by the control stream, so a worker that starts
// late knows it at once.
type PolicyState struct {
	V uint8 `msgpack:"v" json:"-"`
	// Epoch counts the announcements: each one stores the next, so a worker applies a state
	// only when it is newer than the one it has, however it learnt of them.
	Epoch uint64 `msgpack:"ep" json:"epoch"`
	// Version is the policy version generations are tagged with; it never decreases.
	Version int64 `msgpack:"pv" json:"version"`
	// Paused holds every new generation until a state with Paused false.
	Paused bool `msgpack:"pa,omitempty" json:"paused"`
	// OnPause is what the pause does to generations in flight: OnPauseFinish (empty means it)
	// or OnPauseAbort.
	OnPause string `msgpack:"op,omitempty" json:"on_pause,omitempty"`
	// Time is when the state was announced (unix nanoseconds).
	Time int64 `msgpack:"ts" json:"time_ns"`
}

// Worker kinds of WorkerStatus.Kind.
const (
	WorkerLLM = "llm"
	WorkerEnv = "env"
)

// WorkerStatus is a worker's answer to a status request on Subjects.ControlWorkers: which
// policy state it applies and what it has in flight. A trainer's pause waits until every LLM
// worker answers with the pause's epoch and nothing in flight.
type WorkerStatus struct {
	V    uint8  `msgpack:"v" json:"-"`
	Kind string `msgpack:"k" json:"kind"` // WorkerLLM or WorkerEnv
	ID   string `msgpack:"id" json:"id"`
	// Epoch and Version are of the policy state the worker applies; Paused is whether it
	// holds new generations.
	Epoch   uint64 `msgpack:"ep" json:"epoch"`
	Version int64  `msgpack:"pv" json:"version"`
	Paused  bool   `msgpack:"pa,omitempty" json:"paused"`
	// InFlight counts an LLM worker's generations running on model servers, or an env
	// worker's episodes.
	InFlight int64 `msgpack:"if" json:"in_flight"`
	// Held counts the requests (LLM worker) or turns (env worker) waiting for a resume.
	Held int64 `msgpack:"hd,omitempty" json:"held"`
	// Endpoints are an LLM worker's model servers, with their health and load.
	Endpoints []EndpointStatus `msgpack:"eps,omitempty" json:"endpoints,omitempty"`
}

// EndpointStatus is one model server as an LLM worker sees it.
type EndpointStatus struct {
	URL string `msgpack:"u" json:"url"`
	// Healthy is false while the worker has the endpoint marked down (it failed and has not
	// answered /health since).
	Healthy bool `msgpack:"h" json:"healthy"`
	// InFlight counts the worker's requests at the endpoint; Max is its cap.
	InFlight int64 `msgpack:"if" json:"in_flight"`
	Max      int64 `msgpack:"mx" json:"max_in_flight"`
}

// Validate checks a policy state: V == Version; version ≥ 0; on_pause empty or known, and only
// on a pause.
func (p *PolicyState) Validate() error { return asError(p.validate().in("PolicyState")) }

func (p *PolicyState) validate() *ValidationError {
	if p.OnPause != "" && !p.Paused {
		return invalid("on_pause", "%.64q on a state that is not paused", p.OnPause)
	}
	return first(
		checkVersion(p.V),
		checkNonNegative64("version", p.Version),
		checkOneOf("on_pause", p.OnPause, OnPauses),
	)
}

// Validate checks a worker status: V == Version; kind known; id a valid id; counts ≥ 0.
func (s *WorkerStatus) Validate() error { return asError(s.validate().in("WorkerStatus")) }

func (s *WorkerStatus) validate() *ValidationError {
	var kind *ValidationError
	if s.Kind != WorkerLLM && s.Kind != WorkerEnv {
		kind = invalid("kind", "%.64q is not one of %v", s.Kind, []string{WorkerLLM, WorkerEnv})
	}
	return first(
		checkVersion(s.V),
		kind,
		checkID("id", s.ID),
		checkNonNegative64("version", s.Version),
		checkNonNegative64("in_flight", s.InFlight),
		checkNonNegative64("held", s.Held),
		checkEndpoints(s.Endpoints),
	)
}

func checkEndpoints(eps []EndpointStatus) *ValidationError {
	for i, e := range eps {
		if e.URL == "" || e.InFlight < 0 || e.Max < 0 {
			return invalid(fmt.Sprintf("endpoints[%d]", i), "url must be set and counts >= 0, got %+v", e)
		}
	}
	return nil
}
