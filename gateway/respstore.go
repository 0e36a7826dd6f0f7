package gateway

import (
	"bytes"
	"container/list"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/rollfleet/rollfleet/internal/vllmapi"
)

// Defaults of the stored responses (Options.ResponseTTL, MaxStoredResponses,
// MaxStoredResponseBytes).
const (
	DefaultResponseTTL            = time.Hour
	DefaultMaxStoredResponses     = 16384
	DefaultMaxStoredResponseBytes = 256 << 20
)

// responseStore keeps what a Responses call added to its conversation (its new input items and
// its output items, without the training fields) so that a later request naming it as
// previous_response_id continues the conversation, as the OpenAI Agents SDK does. Each entry
// links to its own previous response, so a conversation of n calls takes O(n) bytes. Entries
// expire after a TTL and the oldest are dropped first beyond the count and byte bounds: a
// continuation of a conversation one of whose responses is gone is refused, never guessed.
type responseStore struct {
	ttl        time.Duration
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	byID  map[string]*list.Element // of *storedResponse, oldest at the front
	order list.List
	bytes int64
}

// storedResponse is one Responses call's part of its conversation.
type storedResponse struct {
	// scope is the caller's (API key and X-Session-Scope): only the same scope continues it.
	id, previous, scope string
	items               []json.RawMessage
	size                int64
	expires             time.Time
}

func newResponseStore(ttl time.Duration, maxEntries int, maxBytes int64) *responseStore {
	return &responseStore{ttl: ttl, maxEntries: maxEntries, maxBytes: maxBytes, byID: make(map[string]*list.Element)}
}

// put stores a response's part of its conversation. It reports false, storing nothing, for
// a part over a 64th of the byte bound, so one call cannot push every other out.
func (s *responseStore) put(id, previous, scope string, items []json.RawMessage, now time.Time) bool {
	e := &storedResponse{id: id, previous: previous, scope: scope, items: items, expires: now.Add(s.ttl),
		size: int64(len(id) + len(previous) + len(scope) + 64)}
	for _, it := range items {
		e.size += int64(len(it))
	}
	if e.size > s.maxBytes/64 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	s.byID[id] = s.order.PushBack(e)
	s.bytes += e.size
	for s.order.Len() > s.maxEntries || s.bytes > s.maxBytes {
		s.drop(s.order.Front())
	}
	return true
}

// conversation returns the items of the conversation that response id ended, for a caller
// of the given scope: every earlier response's, oldest first, then its own. Reading a
// conversation keeps all of it for another TTL: one in use does not expire.
func (s *responseStore) conversation(id, scope string, now time.Time) ([]json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	var chain []*storedResponse
	for cur := id; cur != ""; {
		el, ok := s.byID[cur]
		if ok && el.Value.(*storedResponse).scope != scope {
			ok = false // another caller's: as unknown as any id never issued
		}
		if !ok {
			if cur == id {
				return nil, vllmapi.StatusError(http.StatusNotFound, "previous response %.64q is not stored (it expired, was never stored, or store was false)", id)
			}
			return nil, vllmapi.StatusError(http.StatusNotFound, "previous response %.64q continues %.64q, which is no longer stored", id, cur)
		}
		r := el.Value.(*storedResponse)
		chain = append(chain, r)
		cur = r.previous
	}
	for _, r := range chain {
		r.expires = now.Add(s.ttl)
		s.order.MoveToBack(s.byID[r.id])
	}
	var items []json.RawMessage
	for i := len(chain) - 1; i >= 0; i-- {
		items = append(items, chain[i].items...)
	}
	return items, nil
}

// expire drops the entries past their TTL: all at the front, since every entry lives as long.
func (s *responseStore) expire(now time.Time) {
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*storedResponse).expires); el = s.order.Front() {
		s.drop(el)
	}
}

func (s *responseStore) drop(el *list.Element) {
	r := s.order.Remove(el).(*storedResponse)
	delete(s.byID, r.id)
	s.bytes -= r.size
}

// len is the number of stored responses.
func (s *responseStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// inputItems is a Responses input as a list of items: a string is one user message.
func inputItems(raw json.RawMessage) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, err
		}
		item, err := json.Marshal(map[string]string{"type": "message", "role": "user", "content": text})
		return []json.RawMessage{item}, err
	}
	var items []json.RawMessage
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	return items, json.Unmarshal(raw, &items)
}
