package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// segment is one unbroken token trace of a session: its first call's prompt, then for each
// call the prompt tokens beyond the trace (logprob 0) and the completion (one action range).
type segment struct {
	tokens   messages.Tokens
	logprobs messages.Logprobs
	ranges   messages.Ranges
	finishes []string // one finish reason per call
	prompt   string   // the first call's prompt text, for Trajectory.Prompt
	start    time.Time
	genNanos int64
	// driftReason says why the segment began; empty for the first one.
	driftReason string
	versions    []int64 // distinct policy versions, in order
	// last is the segment's last call when it was a chat call, for matching the next call's
	// messages (see lastCall.restore); nil after any other call.
	last *lastCall
}

// session is one client conversation. The fields under "guarded" belong to the store's mutex;
// segs belongs to whoever holds the session's lease (busy).
type session struct {
	id      string
	created time.Time

	// scope is set for a session opened by a call without a session id: later calls in the
	// same scope attach to it by their prompt (see store.attach); metadata is its first call's.
	scope    string
	auto     bool
	metadata map[string]string

	// guarded by store.mu
	lastUsed time.Time
	busy     bool
	calls    int // calls recorded
	tokens   int // tokens held over all segments
	nsegs    int
	// trace is the current segment's tokens as of the last release: only appended to, so
	// its elements may be read under store.mu while a lease holder appends beyond them.
	// traceHash is its hash in the scope's index (auto sessions with a trace only).
	trace     []int32
	traceHash uint64
	// last is the current segment's last chat call as of the last release, indexed by its
	// hash in the scope's index (auto sessions only): calls without an id that send it back
	// find the session by it (see store.byConversation).
	last *lastCall

	segs []*segment
	// group places the session in a group of samples of one prompt: set on the sessions of
	// a call with n > 1 (see store.fork), the default of its finish. Belongs to the lease
	// holder.
	group *placement
}

// placement is a session's place in a group of samples of one prompt.
type placement struct {
	id          string
	index, size int32
}

// groupID is the group of the leased session's records: its placement's, else its own id.
func (l *lease) groupID() string {
	if g := l.s.group; g != nil {
		return g.id
	}
	return l.s.id
}

// summary is what GET /v1/sessions/{id} reports.
type summary struct {
	SessionID string `json:"session_id"`
	Calls     int    `json:"calls"`
	Tokens    int    `json:"tokens"`
	Segments  int    `json:"segments"`
	Busy      bool   `json:"busy"`
	IdleMS    int64  `json:"idle_ms"`
}

// store holds the open sessions and remembers the ids of recently ended ones.
type store struct {
	maxSessions int
	maxTokens   int
	finishedTTL time.Duration

	mu       sync.Mutex
	sessions map[string]*session
	// scopes indexes the open sessions without a client-given id by scope, for attaching
	// calls by prompt; ended sessions leave it.
	scopes map[string]*scopeIndex
	// ended remembers ended session ids until finishedTTL has passed (oldest first in
	// endedOrder), so a late call cannot reopen a session whose records are published.
	ended      map[string]time.Time
	endedOrder []string
}

func newStore(maxSessions, maxTokens int, finishedTTL time.Duration) *store {
	return &store{
		maxSessions: maxSessions, maxTokens: maxTokens, finishedTTL: finishedTTL,
		sessions: make(map[string]*session), ended: make(map[string]time.Time), scopes: make(map[string]*scopeIndex),
	}
}

// lease is the exclusive right to use a session: its holder alone reads and writes the
// session's segments until it calls release or end.
type lease struct {
	st      *store
	s       *session
	created bool // the session was opened for this lease
	// recorded is set once the lease recorded a call: a session opened for a lease that
	// recorded none is closed again on release.
	recorded bool
}

// acquire leases the session id, opening it when create is set and it does not exist.
func (st *store) acquire(id string, create bool, now time.Time) (*lease, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.ended[id]; ok {
		return nil, fmt.Errorf("%w: %q", ErrSessionFinished, id)
	}
	s, ok := st.sessions[id]
	switch {
	case ok && s.busy:
		return nil, fmt.Errorf("%w: %q", ErrSessionBusy, id)
	case ok:
		s.busy = true
		return &lease{st: st, s: s}, nil
	case !create:
		return nil, fmt.Errorf("%w: %q", ErrSessionNotFound, id)
	case len(st.sessions) >= st.maxSessions:
		return nil, fmt.Errorf("%w: %d open (close some with finish or DELETE)", ErrTooManySessions, len(st.sessions))
	}
	s = &session{id: id, created: now, lastUsed: now, busy: true}
	st.sessions[id] = s
	return &lease{st: st, s: s, created: true}, nil
}

// release gives the session back; with touch it counts as used now. A session opened for
// this lease that recorded nothing is closed again, so a failed first call (or a failed call
// with n > 1, for the sessions it forked) leaves nothing.
func (l *lease) release(touch bool, now time.Time) {
	st, s := l.st, l.s
	st.mu.Lock()
	defer st.mu.Unlock()
	s.busy = false
	if touch {
		s.lastUsed = now
	}
	s.nsegs = len(s.segs)
	s.calls, s.tokens = 0, 0
	for _, seg := range s.segs {
		s.calls += len(seg.ranges)
		s.tokens += len(seg.tokens)
	}
	if cur := l.current(); cur != nil {
		if idx := st.scopes[s.scope]; s.auto && idx != nil {
			idx.unindex(s)
			s.trace, s.last = cur.tokens, cur.last
			idx.index(s)
		} else {
			s.trace, s.last = cur.tokens, cur.last
		}
	}
	if l.created && !l.recorded && st.sessions[s.id] == s {
		st.removeLocked(s)
	}
}

// removeLocked forgets an open session.
func (st *store) removeLocked(s *session) {
	delete(st.sessions, s.id)
	if !s.auto {
		return
	}
	if idx := st.scopes[s.scope]; idx != nil {
		idx.unindex(s)
		if idx.open--; idx.open == 0 {
			delete(st.scopes, s.scope)
		}
	}
}

// scopeIndex finds a scope's sessions by their traces: by the hash of the whole trace, and
// the trace lengths present, so that a prompt is hashed once, prefix by prefix, and looked
// up only at those lengths, instead of compared with every session's trace (thousands of
// sessions sharing a long system prompt and tool list, under the store's lock).
type scopeIndex struct {
	open    int // sessions of the scope
	byHash  map[uint64][]*session
	lengths map[int]int // trace length → sessions indexed with it
	// byConversation indexes the sessions by the hash of their last chat call's messages
	// and reply (conversationHashes).
	byConversation map[uint64][]*session
}

func newScopeIndex() *scopeIndex {
	return &scopeIndex{byHash: make(map[uint64][]*session), lengths: make(map[int]int), byConversation: make(map[uint64][]*session)}
}

// traceHasher hashes a token sequence one token at a time (FNV-1a over the tokens' 32 bits),
// so that every prefix's hash comes on the way.
type traceHasher uint64

const (
	fnvOffset traceHasher = 14695981039346656037
	fnvPrime              = 1099511628211
)

func (h traceHasher) add(tok int32) traceHasher { return (h ^ traceHasher(uint32(tok))) * fnvPrime }

func hashTrace(trace []int32) uint64 {
	h := fnvOffset
	for _, t := range trace {
		h = h.add(t)
	}
	return uint64(h)
}

func (x *scopeIndex) index(s *session) {
	if s.last != nil {
		x.byConversation[s.last.hash] = append(x.byConversation[s.last.hash], s)
	}
	if len(s.trace) == 0 {
		return
	}
	s.traceHash = hashTrace(s.trace)
	x.byHash[s.traceHash] = append(x.byHash[s.traceHash], s)
	x.lengths[len(s.trace)]++
}

func (x *scopeIndex) unindex(s *session) {
	if s.last != nil {
		removeIndexed(x.byConversation, s.last.hash, s)
	}
	if len(s.trace) == 0 {
		return
	}
	removeIndexed(x.byHash, s.traceHash, s)
	if x.lengths[len(s.trace)]--; x.lengths[len(s.trace)] <= 0 {
		delete(x.lengths, len(s.trace))
	}
}

// removeIndexed removes s from index's list under h.
func removeIndexed(index map[uint64][]*session, h uint64, s *session) {
	list := index[h]
	if i := slices.Index(list, s); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(index, h)
	} else {
		index[h] = list
	}
}

// longest returns the session whose trace the prompt extends, the longest such trace
// (strictly shorter than the prompt), preferring a free one among equally long ones.
func (x *scopeIndex) longest(prompt []int32) *session {
	var best *session
	h := fnvOffset
	for n, tok := range prompt[:max(len(prompt)-1, 0)] {
		h = h.add(tok)
		if x.lengths[n+1] == 0 {
			continue
		}
		for _, s := range x.byHash[uint64(h)] {
			if len(s.trace) != n+1 || !extends(prompt, s.trace) {
				continue // a hash collision
			}
			// Lengths only grow along the prompt: s is at least as long as best.
			if best == nil || len(s.trace) > len(best.trace) || best.busy && !s.busy {
				best = s
			}
		}
	}
	return best
}

// attach leases the open session of scope whose trace the prompt extends, the longest such
// trace, or opens a new one under the id newID gives. The prompt must be longer than the
// trace, so a first call (a bare prompt) never attaches to a session holding that prompt and
// its answer. Sessions with equally long matching traces are interchangeable (the samples of
// a group whose turns came out the same): a free one is taken. Every longest match being in
// use is ErrSessionBusy: calls of one conversation are sequential.
func (st *store) attach(scope string, prompt []int32, metadata map[string]string, newID func() string, now time.Time) (*lease, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var best *session
	if idx := st.scopes[scope]; idx != nil {
		best = idx.longest(prompt)
	}
	switch {
	case best != nil && best.busy:
		return nil, fmt.Errorf("%w: %q (the call extends its tokens)", ErrSessionBusy, best.id)
	case best != nil:
		best.busy = true
		return &lease{st: st, s: best}, nil
	case len(st.sessions) >= st.maxSessions:
		return nil, fmt.Errorf("%w: %d open (close some with finish or DELETE)", ErrTooManySessions, len(st.sessions))
	}
	s := &session{id: newID(), created: now, lastUsed: now, busy: true, scope: scope, auto: true, metadata: metadata}
	st.sessions[s.id] = s
	idx := st.scopes[scope]
	if idx == nil {
		idx = newScopeIndex()
		st.scopes[scope] = idx
	}
	idx.open++
	return &lease{st: st, s: s, created: true}, nil
}

// ForkSuffix joins a session id and a sample index into the id of the session holding that
// sample of a call with n > 1.
const ForkSuffix = "~"

// forkID is the id of the session holding sample i (i ≥ 1) of a call with n > 1 on session id.
func forkID(id string, i int) string { return id + ForkSuffix + strconv.Itoa(i) }

// fork opens the sessions for samples 1 … n-1 of a call with n > 1 on the leased session,
// placed in the group of the session's id (the session joins it as sample 0 once the call
// has recorded its samples, see Gateway.run). Each fork starts as a copy of the
// session, so that it holds the whole conversation its sample continues, and is leased to
// the caller; a fork that records nothing is closed again on release. A fork id already
// open or recently ended is ErrSessionExists: n > 1 once per session, or finish the samples
// first.
func (st *store) fork(l *lease, n int, now time.Time) ([]*lease, error) {
	src := l.s
	if g := src.group; g != nil && g.size > 1 {
		return nil, fmt.Errorf("%w: session %q is already sample %d of the %d of group %q", ErrNestedGroup, src.id, g.index, g.size, g.id)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.sessions)+n-1 > st.maxSessions {
		return nil, fmt.Errorf("%w: %d open, n = %d asks for %d more (close some with finish or DELETE)", ErrTooManySessions, len(st.sessions), n, n-1)
	}
	for i := 1; i < n; i++ {
		id := forkID(src.id, i)
		_, open := st.sessions[id]
		_, ended := st.ended[id]
		if open || ended {
			return nil, fmt.Errorf("%w: %q, for sample %d of this call", ErrSessionExists, id, i)
		}
	}
	out := make([]*lease, n-1)
	for i := 1; i < n; i++ {
		s := &session{
			id: forkID(src.id, i), created: now, lastUsed: now, busy: true,
			scope: src.scope, auto: src.auto, metadata: src.metadata,
			segs: cloneSegments(src.segs), group: &placement{id: src.id, index: int32(i), size: int32(n)},
		}
		st.sessions[s.id] = s
		if s.auto {
			st.scopes[s.scope].open++
		}
		out[i-1] = &lease{st: st, s: s, created: true}
	}
	return out, nil
}

// cloneSegments copies segments deeply enough that appending to a copy never writes to the
// original's arrays.
func cloneSegments(segs []*segment) []*segment {
	out := make([]*segment, len(segs))
	for i, seg := range segs {
		c := *seg
		c.tokens, c.logprobs, c.ranges = slices.Clone(seg.tokens), slices.Clone(seg.logprobs), slices.Clone(seg.ranges)
		c.finishes, c.versions = slices.Clone(seg.finishes), slices.Clone(seg.versions)
		out[i] = &c
	}
	return out
}

// byConversation leases a free open session of scope whose last chat call and reply msgs
// repeat (lastCall.restore), the longest such conversation, or returns nil. Sessions with the
// same conversation are interchangeable.
func (st *store) byConversation(scope string, msgs []messages.ChatMessage) *lease {
	hashes := conversationHashes(msgs)
	st.mu.Lock()
	defer st.mu.Unlock()
	idx := st.scopes[scope]
	if idx == nil {
		return nil
	}
	for n := len(msgs) - 1; n > 0; n-- { // n messages before the reply; something after it
		h, ok := hashes[n]
		if !ok {
			continue
		}
		for _, s := range idx.byConversation[h] {
			if !s.busy && len(s.last.msgs) == n {
				if _, k := s.last.restore(msgs); k == n+1 {
					s.busy = true
					return &lease{st: st, s: s}
				}
			}
		}
	}
	return nil
}

// match leases the one open session that keep selects. None is ErrSessionNotFound, several
// ErrSessionAmbiguous, unless they are interchangeable: then the oldest free one.
func (st *store) match(what string, interchangeable bool, keep func(*session) bool) (*lease, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var found *session
	n := 0
	for _, s := range st.sessions {
		if !keep(s) {
			continue
		}
		n++
		if found == nil || (interchangeable && (found.busy && !s.busy ||
			found.busy == s.busy && s.created.Before(found.created))) {
			found = s
		}
	}
	switch {
	case n == 0:
		return nil, fmt.Errorf("%w: none with %s", ErrSessionNotFound, what)
	case n > 1 && !interchangeable:
		return nil, fmt.Errorf("%w: %d open sessions with %s", ErrSessionAmbiguous, n, what)
	case found.busy:
		return nil, fmt.Errorf("%w: %q", ErrSessionBusy, found.id)
	}
	found.busy = true
	return &lease{st: st, s: found}, nil
}

// byMetadata leases the one open session without a client-given id whose first call's
// metadata has every pair of want.
func (st *store) byMetadata(want map[string]string) (*lease, error) {
	return st.match(fmt.Sprintf("metadata %v", want), false, func(s *session) bool {
		if !s.auto {
			return false
		}
		for k, v := range want {
			if got, ok := s.metadata[k]; !ok || got != v {
				return false
			}
		}
		return true
	})
}

// byTrace leases an open session whose current tokens are exactly tokens: the prompt and
// completion of its last call. Sessions with the same tokens hold the same trajectory, so
// any of them (the oldest free one) takes the result.
func (st *store) byTrace(tokens []int32) (*lease, error) {
	return st.match(fmt.Sprintf("a %d-token trace ending the given call", len(tokens)), true, func(s *session) bool {
		return slices.Equal(s.trace, tokens)
	})
}

// end closes the session for good and remembers its id.
func (l *lease) end(now time.Time) {
	st := l.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sessions[l.s.id] == l.s {
		st.removeLocked(l.s)
	}
	if _, ok := st.ended[l.s.id]; !ok {
		st.endedOrder = append(st.endedOrder, l.s.id)
	}
	st.ended[l.s.id] = now
	st.pruneLocked(now)
}

// pruneLocked forgets ended ids older than finishedTTL, and the oldest beyond a bound.
func (st *store) pruneLocked(now time.Time) {
	limit := 4 * st.maxSessions
	drop := 0
	for drop < len(st.endedOrder) {
		id := st.endedOrder[drop]
		if t := st.ended[id]; now.Sub(t) < st.finishedTTL && len(st.endedOrder)-drop <= limit {
			break
		}
		delete(st.ended, id)
		drop++
	}
	if drop > 0 {
		st.endedOrder = slices.Delete(st.endedOrder, 0, drop)
	}
}

// idle leases every session not in use and unused since before cutoff.
func (st *store) idle(cutoff, now time.Time) []*lease {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.pruneLocked(now)
	var out []*lease
	for _, s := range st.sessions {
		if !s.busy && s.lastUsed.Before(cutoff) {
			s.busy = true
			out = append(out, &lease{st: st, s: s})
		}
	}
	return out
}

// summary reports a session's state.
func (st *store) summary(id string, now time.Time) (summary, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.sessions[id]
	if !ok {
		if _, ended := st.ended[id]; ended {
			return summary{}, fmt.Errorf("%w: %q", ErrSessionFinished, id)
		}
		return summary{}, fmt.Errorf("%w: %q", ErrSessionNotFound, id)
	}
	return summary{
		SessionID: id, Calls: s.calls, Tokens: s.tokens, Segments: s.nsegs, Busy: s.busy,
		IdleMS: now.Sub(s.lastUsed).Milliseconds(),
	}, nil
}

// open reports the number of open sessions.
func (st *store) open() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.sessions)
}

// extends reports whether prompt starts with the trace.
func extends(prompt, trace []int32) bool {
	return len(prompt) >= len(trace) && slices.Equal(prompt[:len(trace)], trace)
}

// divergence describes where prompt leaves the trace.
func divergence(prompt, trace []int32) string {
	n := min(len(prompt), len(trace))
	i := 0
	for i < n && prompt[i] == trace[i] {
		i++
	}
	if i == n {
		return fmt.Sprintf("prompt of %d tokens is shorter than the session's %d-token trace it repeats", len(prompt), len(trace))
	}
	return fmt.Sprintf("prompt differs from the session's %d-token trace at token %d (prompt has %d tokens)", len(trace), i, len(prompt))
}

// callsMade is the number of model calls the session has recorded over all its segments.
func (l *lease) callsMade() int {
	n := 0
	for _, seg := range l.s.segs {
		n += len(seg.ranges)
	}
	return n
}

// tokensHeld is the number of tokens the session holds over all its segments.
func (l *lease) tokensHeld() int {
	n := 0
	for _, seg := range l.s.segs {
		n += len(seg.tokens)
	}
	return n
}

// current is the segment the next call extends, or nil.
func (l *lease) current() *segment {
	if n := len(l.s.segs); n > 0 {
		return l.s.segs[n-1]
	}
	return nil
}

// reserve checks that a call with this prompt and up to maxTokens completion tokens keeps the
// session within maxTokens tokens.
func (l *lease) reserve(prompt []int32, maxTokens int32) error {
	added := len(prompt)
	if cur := l.current(); cur != nil && extends(prompt, cur.tokens) {
		added -= len(cur.tokens)
	}
	if held := l.tokensHeld(); held+added+int(maxTokens) > l.st.maxTokens {
		return fmt.Errorf("%w: the session holds %d tokens, this call adds %d prompt tokens and up to %d completion tokens, the limit is %d",
			ErrSessionTooLong, held, added, maxTokens, l.st.maxTokens)
	}
	return nil
}

// recorded is where a call landed in its session.
type recorded struct {
	segment int    // segment index
	call    int    // the call's index in the session
	drift   string // non-empty when the call began a new segment after the first
}

// record appends one model call to the session: prompt ids beyond the trace as non-action
// tokens, then the completion as one action range. A prompt that does not extend the trace
// begins a new segment.
func (l *lease) record(prompt []int32, reply *messages.GenerateReply, promptText string, genNanos int64, now time.Time) recorded {
	s := l.s
	rec := recorded{call: l.callsMade()}
	seg := l.current()
	switch {
	case seg == nil:
		seg = &segment{prompt: promptText, start: now}
		s.segs = append(s.segs, seg)
	case !extends(prompt, seg.tokens):
		rec.drift = divergence(prompt, seg.tokens)
		seg = &segment{prompt: promptText, start: now, driftReason: rec.drift}
		s.segs = append(s.segs, seg)
	}
	rec.segment = len(s.segs) - 1
	l.recorded = true
	seg.last = nil // a chat call remembers itself once its reply is parsed
	seg.tokens = append(seg.tokens, prompt[len(seg.tokens):]...)
	seg.logprobs = append(seg.logprobs, make(messages.Logprobs, len(seg.tokens)-len(seg.logprobs))...)
	start := len(seg.tokens)
	seg.tokens = append(seg.tokens, reply.Tokens...)
	seg.logprobs = append(seg.logprobs, reply.Logprobs...)
	seg.ranges = append(seg.ranges, messages.Range{Start: int32(start), End: int32(len(seg.tokens))})
	seg.finishes = append(seg.finishes, reply.FinishReason)
	seg.genNanos += genNanos
	seg.versions = append(seg.versions, reply.PolicyVersion)
	return rec
}

// remember keeps the chat call just recorded as the current segment's last call: the
// messages it rendered and the reply the gateway returned.
func (l *lease) remember(msgs []messages.ChatMessage, out *chatOut, endOfTurn bool, settings uint64) {
	seg := l.current()
	if seg == nil {
		return
	}
	// Only the current segment's last call is ever read: earlier ones let go of theirs.
	for _, s := range l.s.segs {
		s.last = nil
	}
	seg.last = newLastCall(msgs, out, endOfTurn, settings)
}

// segmentEpisodeID is the episode id of segment k of a session: the session id for the first,
// "<session>/seg<k>" for the others.
func segmentEpisodeID(session string, k int) string {
	if k == 0 {
		return session
	}
	return session + "/seg" + strconv.Itoa(k)
}

// outcome is a finish request resolved against the gateway's defaults.
type outcome struct {
	reward, scores float64
	extraLogs      map[string]float64
	info           map[string]string
	label, env     string
	groupID        string
	index, size    int32
}

// trajectories turns the session's segments into one trajectory each. Every segment carries
// the session's reward on its last call; the other calls' step rewards are 0.
func (l *lease) trajectories(o *outcome, now time.Time) []messages.Trajectory {
	s := l.s
	out := make([]messages.Trajectory, len(s.segs))
	for k, seg := range s.segs {
		turns := len(seg.ranges)
		steps := make([]float64, turns)
		steps[turns-1] = o.reward
		last := seg.finishes[turns-1]
		logs := make(map[string]float64, len(o.extraLogs)+4)
		for key, v := range o.extraLogs {
			logs[key] = v
		}
		logs["turn_count"] = float64(turns)
		logs["segment_index"] = float64(k)
		logs["segment_count"] = float64(len(s.segs))
		logs["drift"] = 0
		if seg.driftReason != "" {
			logs["drift"] = 1
		}
		info := make(map[string]string, len(o.info)+2)
		for key, v := range o.info {
			info[key] = v
		}
		info["session_id"] = s.id
		if seg.driftReason != "" {
			info["drift_reason"] = seg.driftReason
		}
		out[k] = messages.Trajectory{
			V:                 messages.Version,
			EpisodeID:         segmentEpisodeID(s.id, k),
			GroupID:           o.groupID,
			SampleIndex:       o.index,
			GroupSize:         o.size,
			Env:               o.env,
			Prompt:            seg.prompt,
			Label:             o.label,
			ObservationTokens: seg.tokens,
			ActionRanges:      seg.ranges,
			RolloutLogProbs:   seg.logprobs,
			Reward:            o.reward,
			Scores:            o.scores,
			ExtraLogs:         logs,
			Truncated:         last == "length",
			Turns:             int32(turns),
			StepRewards:       steps,
			FinishReason:      last,
			PolicyVersions:    seg.versions,
			Staleness:         messages.Staleness(seg.versions),
			SubmitTime:        seg.start.UnixNano(),
			DoneTime:          now.UnixNano(),
			GenerateNanos:     seg.genNanos,
			Info:              info,
			TraceID:           messages.TraceIDOf("gateway-session", s.id), // a session is one trace
		}
	}
	return out
}
