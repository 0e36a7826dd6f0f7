package collector

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rollfleet/rollfleet/messages"
)

// ErrBadShard reports a shard that is not an index below a count, the
// count a power of two up to messages.MaxStepShards.
var ErrBadShard = errors.New("collector: bad shard")

// Shard is one of Count parts of the steps stream: the steps of the groups
// whose slot (messages.StepSlot) modulo Count is Index, which one subject
// filter matches (messages.Subjects.StepsOfShard). Count is a power of two up
// to messages.MaxStepShards. A group's episodes share a slot, so the
// collector of a shard assembles whole groups. The zero value, like Count 1,
// is the whole stream.
type Shard struct {
	Index, Count int
}

// ParseShard reads a shard written as "index/count", e.g. "0/4".
func ParseShard(s string) (Shard, error) {
	i, n, ok := strings.Cut(s, "/")
	index, err1 := strconv.Atoi(i)
	count, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || count < 1 {
		return Shard{}, fmt.Errorf("%w: %q is not index/count", ErrBadShard, s)
	}
	sh := Shard{Index: index, Count: count}
	return sh, sh.Validate()
}

// String writes the shard as ParseShard reads it.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, max(s.Count, 1)) }

// Validate reports a shard that is neither the zero value nor one that
// messages.ValidateShard accepts, as ErrBadShard.
func (s Shard) Validate() error {
	if s == (Shard{}) {
		return nil
	}
	if err := messages.ValidateShard(s.Index, s.Count); err != nil {
		return fmt.Errorf("%w: %w", ErrBadShard, err)
	}
	return nil
}

// whole reports whether the shard is the whole steps stream.
func (s Shard) whole() bool { return s.Count <= 1 }

// Consumer names the shard's consumer on the steps stream: durable itself
// for the whole stream, else durable-<index>of<count>. Shards of different
// counts have different consumers, so a fleet that changes its count of
// shards starts over on new consumers (the old ones' steps are decided by
// the new, and the old consumers can be deleted).
func (s Shard) Consumer(durable string) string {
	if s.whole() {
		return durable
	}
	return fmt.Sprintf("%s-%dof%d", durable, s.Index, s.Count)
}

// filter is the subject filter of the shard's steps.
func (s Shard) filter(subj messages.Subjects) string {
	return subj.StepsOfShard(s.Index, max(s.Count, 1))
}
