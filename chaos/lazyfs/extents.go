package lazyfs

import (
	"math"
	"slices"
	"sort"
)

// extent is a run of bytes written at off and not yet synced.
type extent struct {
	off  int64
	data []byte
}

func (e extent) end() int64 { return e.off + int64(len(e.data)) }

// extents is one file's unsynced data: runs sorted by offset that neither
// overlap nor touch. Touching runs are merged, so a file written
// sequentially is one run and its memory is about the bytes pending.
type extents []extent

// write records data at off, over whatever was pending there. It copies
// data: the caller's buffer belongs to the FUSE request.
func (x extents) write(off int64, data []byte) extents {
	if len(data) == 0 {
		return x
	}
	end := off + int64(len(data))
	// x[i:j] are the runs that overlap or touch [off, end).
	i := sort.Search(len(x), func(k int) bool { return x[k].end() >= off })
	j := i
	for j < len(x) && x[j].off <= end {
		j++
	}
	if i == j {
		return slices.Insert(x, i, extent{off: off, data: slices.Clone(data)})
	}
	lo, hi := min(off, x[i].off), max(end, x[j-1].end())
	var buf []byte
	if x[i].off == lo {
		// Growing the first run in place keeps appends amortized O(1)
		// instead of copying the whole run on every write. Every byte of
		// [lo, hi) is set below: the runs and the write cover it.
		buf = slices.Grow(x[i].data, int(hi-lo)-len(x[i].data))[:hi-lo]
	} else {
		buf = make([]byte, hi-lo)
		copy(buf[x[i].off-lo:], x[i].data)
	}
	for _, e := range x[i+1 : j] {
		copy(buf[e.off-lo:], e.data)
	}
	copy(buf[off-lo:], data)
	x[i] = extent{off: lo, data: buf}
	return slices.Delete(x, i+1, j)
}

// punch forgets what is pending in [off, end).
func (x extents) punch(off, end int64) extents {
	if end <= off {
		return x // splitting a run at off would leave two that touch
	}
	var out extents
	for _, e := range x {
		if e.end() <= off || e.off >= end {
			out = append(out, e)
			continue
		}
		if e.off < off {
			// A full slice expression, so growing the left part later
			// reallocates instead of writing over the right part.
			k := off - e.off
			out = append(out, extent{off: e.off, data: e.data[:k:k]})
		}
		if e.end() > end {
			out = append(out, extent{off: end, data: e.data[end-e.off:]})
		}
	}
	return out
}

// truncate forgets what is pending at or beyond size.
func (x extents) truncate(size int64) extents { return x.punch(size, math.MaxInt64) }

// size is where the pending data ends, 0 if none is.
func (x extents) size() int64 {
	if len(x) == 0 {
		return 0
	}
	return x[len(x)-1].end()
}

// bytes is how many bytes are pending.
func (x extents) bytes() int64 {
	var n int64
	for _, e := range x {
		n += int64(len(e.data))
	}
	return n
}

// overlay copies the pending data that falls in [off, off+len(buf)) into buf.
func (x extents) overlay(buf []byte, off int64) {
	end := off + int64(len(buf))
	for _, e := range x {
		if e.end() <= off || e.off >= end {
			continue
		}
		lo, hi := max(off, e.off), min(end, e.end())
		copy(buf[lo-off:hi-off], e.data[lo-e.off:hi-e.off])
	}
}
