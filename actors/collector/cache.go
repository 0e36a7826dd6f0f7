package collector

import (
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// runKey names one run of an episode: one delivery (attempt, and the
// delivery's nonce) of one submission (request) of it.
type runKey struct {
	request uint64
	attempt int32
	run     string
}

// String is the run's id in a decision (messages.RunID).
func (k runKey) String() string { return messages.RunID(k.request, k.attempt, k.run) }

func keyOf(ev *messages.StepEvent) runKey {
	return runKey{request: ev.Request, attempt: ev.Attempt, run: ev.Run}
}

// stored is a step event with the stream sequence it was stored at.
type stored struct {
	seq uint64
	ev  *messages.StepEvent
}

// run is the stored steps of one run, by turn.
type run map[int32]stored

// cachedEpisode is what this collector has seen of one episode's runs.
type cachedEpisode struct {
	id   string
	runs map[runKey]run
	// seqs are the stream sequences of every step delivered here, repeats
	// and other runs included: what to delete once the episode is decided.
	seqs    []uint64
	bytes   int64
	touched time.Time
	elem    *list.Element
}

// cache holds the steps this collector has been delivered, by episode, so
// that the usual episode — all of whose steps came to this collector — is
// assembled without reading the stream again. It is only a cache: the steps
// stream is the truth, and an episode with a step missing here (another
// collector acknowledged it, or the entry was evicted) is read back from
// the stream when it ends. That makes eviction always safe, so the cache is
// bounded in episodes and bytes, and idle entries (orphans: episodes decided
// by another collector, runs superseded by a redelivery) expire.
type cache struct {
	mu          sync.Mutex
	byID        map[string]*cachedEpisode
	lru         *list.List // of *cachedEpisode, most recently touched first
	bytes       int64
	maxEpisodes int
	maxBytes    int64
	evicted     uint64
}

func newCache(maxEpisodes int, maxBytes int64) *cache {
	return &cache{byID: make(map[string]*cachedEpisode), lru: list.New(), maxEpisodes: maxEpisodes, maxBytes: maxBytes}
}

// add records a delivered step, evicting the least recently touched
// episodes while the cache is over its bounds.
func (c *cache) add(key runKey, s stored, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := s.ev.EpisodeID
	e := c.byID[id]
	if e == nil {
		e = &cachedEpisode{id: id, runs: make(map[runKey]run, 1)}
		e.elem = c.lru.PushFront(e)
		c.byID[id] = e
	} else {
		c.lru.MoveToFront(e.elem)
	}
	e.touched = now
	r := e.runs[key]
	if r == nil {
		r = make(run)
		e.runs[key] = r
	}
	if !slices.Contains(e.seqs, s.seq) { // a redelivery is the same message
		e.seqs = append(e.seqs, s.seq)
		e.bytes += 8
		c.bytes += 8
	}
	if _, dup := r[s.ev.Turn]; !dup {
		n := stepBytes(s.ev)
		r[s.ev.Turn] = s
		e.bytes += n
		c.bytes += n
	}
	for c.lru.Len() > 1 && (c.lru.Len() > c.maxEpisodes || c.bytes > c.maxBytes) {
		c.removeLocked(c.lru.Back().Value.(*cachedEpisode))
		c.evicted++
	}
}

// runAndSeqs returns a copy of the cached steps of one run (nil when
// none) and, read under the same lock, the stream sequences
// of every step of the episode delivered here when this run is the only one
// cached (else nil).
func (c *cache) runAndSeqs(id string, key runKey) (run, []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil || e.runs[key] == nil {
		return nil, nil
	}
	cp := make(run, len(e.runs[key]))
	for t, s := range e.runs[key] {
		cp[t] = s
	}
	if len(e.runs) != 1 {
		return cp, nil
	}
	return cp, slices.Clone(e.seqs)
}

// request returns the episode request of a cached run of the episode,
// preferring the given run's.
func (c *cache) request(id string, key runKey) *messages.EpisodeRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil {
		return nil
	}
	return requestOf(e.runs, key)
}

// requestOf returns the episode request carried by turn 0 of the given run,
// or of any run.
func requestOf(runs map[runKey]run, key runKey) *messages.EpisodeRequest {
	if s, ok := runs[key][0]; ok {
		return s.ev.Episode
	}
	for _, r := range runs {
		if s, ok := r[0]; ok {
			return s.ev.Episode
		}
	}
	return nil
}

// drop forgets an episode.
func (c *cache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byID[id]; e != nil {
		c.removeLocked(e)
	}
}

// expire evicts the episodes untouched since before now-idle and reports
// how many it evicted.
func (c *cache) expire(now time.Time, idle time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for back := c.lru.Back(); back != nil; back = c.lru.Back() {
		e := back.Value.(*cachedEpisode)
		if now.Sub(e.touched) < idle {
			break
		}
		c.removeLocked(e)
		n++
	}
	c.evicted += uint64(n)
	return n
}

func (c *cache) removeLocked(e *cachedEpisode) {
	c.lru.Remove(e.elem)
	delete(c.byID, e.id)
	c.bytes -= e.bytes
}

// size reports the cached episodes, their estimated bytes and how many
// episodes were evicted so far.
func (c *cache) size() (episodes int, bytes int64, evicted uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID), c.bytes, c.evicted
}

// slim drops what assembly does not use (the env snapshot), so the cache
// holds tokens, numbers and texts (which trajectories carry as their
// conversation).
func slim(ev *messages.StepEvent) *messages.StepEvent {
	cp := *ev
	cp.EnvState = nil
	return &cp
}

// stepBytes estimates the memory a cached step holds.
func stepBytes(ev *messages.StepEvent) int64 {
	const overhead = 512 // the struct, its map entries and small fields
	n := overhead + 4*int64(len(ev.PromptTokens)+len(ev.ActionTokens)+len(ev.FeedbackTokens)+len(ev.ActionLogprobs)) +
		int64(len(ev.Error)+len(ev.ActionText)+len(ev.FeedbackText)) + 64*int64(len(ev.ExtraLogs)+len(ev.Info))
	for _, m := range ev.PromptMessages {
		n += 32 + int64(len(m.Role)+len(m.Content))
	}
	if r := ev.Episode; r != nil {
		n += 512 + int64(len(r.Prompt)+len(r.Label)+len(r.EnvOptions)) + 4*int64(len(r.Sampling.StopTokenIDs))
		for _, m := range r.Messages {
			n += 32 + int64(len(m.Role)+len(m.Content))
		}
	}
	return n
}
