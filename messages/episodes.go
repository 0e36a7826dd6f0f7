package messages

import (
	"fmt"
	"slices"
	"strings"
)

// EpisodeMsgID is the JetStream de-duplication id of an EpisodeRequest:
// "<Token(run)>.<Token(episode)>". It is scoped by run, so an episode id
// that a later run reuses is played again rather than dropped as a
// duplicate within the episodes stream's window, and, since no token holds
// a '.', it names its run and episode unambiguously (ParseEpisodeMsgID).
func EpisodeMsgID(run, episode string) string { return Token(run) + "." + Token(episode) }

// ParseEpisodeMsgID returns the run and episode an EpisodeMsgID names.
func ParseEpisodeMsgID(id string) (run, episode string, err error) {
	r, e, ok := strings.Cut(id, ".")
	if !ok {
		return "", "", fmt.Errorf("messages: %q is no episode message id", id)
	}
	return parseTokenPair(r, e)
}

// ParseEpisodes returns the run and env an Episodes subject names.
func (s Subjects) ParseEpisodes(subject string) (run, env string, err error) {
	rest, ok := strings.CutPrefix(subject, s.prefix()+".episodes.")
	r, e, two := strings.Cut(rest, ".")
	if !ok || !two || strings.Contains(e, ".") {
		return "", "", fmt.Errorf("messages: %q is not an episodes subject", subject)
	}
	return parseTokenPair(r, e)
}

// parseTokenPair parses two tokens (ParseToken).
func parseTokenPair(a, b string) (string, string, error) {
	x, err := ParseToken(a)
	if err != nil {
		return "", "", err
	}
	y, err := ParseToken(b)
	if err != nil {
		return "", "", err
	}
	return x, y, nil
}

// PeekStrings reads the string values of keys from the top-level map of a
// message that may not decode (a malformed or invalid submission), so that
// what it was can still be told: its run, its episode. It reads entries in
// order up to the first it cannot read and skips values of other keys
// within Decode's nesting and length limits; a value that is not a string
// is left out. It never panics, whatever the input.
func PeekStrings(data []byte, keys ...string) map[string]string {
	out := map[string]string{}
	if len(data) > MaxMessageSize {
		return out
	}
	s := scanner{data: data}
	n, ok := s.mapLen()
	for i := uint64(0); ok && i < n; i++ {
		k, isStr := s.str()
		if !isStr {
			return out
		}
		start := s.off
		if v, isStr := s.str(); isStr {
			if slices.Contains(keys, k) {
				out[k] = v
			}
			continue
		}
		s.off = start
		ok = s.value(1) == nil
	}
	return out
}

// mapLen reads a map header.
func (s *scanner) mapLen() (uint64, bool) {
	if s.off >= len(s.data) {
		return 0, false
	}
	c := s.data[s.off]
	s.off++
	switch {
	case c >= 0x80 && c <= 0x8f:
		return uint64(c & 0x0f), true
	case c == 0xde:
		n, err := s.uint(2)
		return n, err == nil
	case c == 0xdf:
		n, err := s.uint(4)
		return n, err == nil
	}
	return 0, false
}

// str reads a string value; on anything else it reports false, having
// consumed an unknown amount.
func (s *scanner) str() (string, bool) {
	if s.off >= len(s.data) {
		return "", false
	}
	c := s.data[s.off]
	s.off++
	var n uint64
	var err error
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n, err = s.uint(1)
	case c == 0xda:
		n, err = s.uint(2)
	case c == 0xdb:
		n, err = s.uint(4)
	default:
		return "", false
	}
	if err != nil || n > uint64(len(s.data)-s.off) {
		return "", false
	}
	v := string(s.data[s.off : s.off+int(n)])
	s.off += int(n)
	return v, true
}
