package lazyfs

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// model is the reference for extents: one byte per offset, with a flag
// saying whether it is pending.
type model struct {
	data    []byte
	pending []bool
}

func (m *model) grow(n int64) {
	for int64(len(m.data)) < n {
		m.data = append(m.data, 0)
		m.pending = append(m.pending, false)
	}
}

func (m *model) write(off int64, p []byte) {
	m.grow(off + int64(len(p)))
	for i, b := range p {
		m.data[off+int64(i)] = b
		m.pending[off+int64(i)] = true
	}
}

func (m *model) punch(off, end int64) {
	for i := off; i < end && i < int64(len(m.data)); i++ {
		m.data[i], m.pending[i] = 0, false
	}
}

// check compares x with m: the bytes each says are pending, where the
// pending data ends, and the extents' own invariants.
func (m *model) check(t *testing.T, x extents) {
	t.Helper()
	for i, e := range x {
		if len(e.data) == 0 {
			t.Fatalf("extent %d is empty: %v", i, x)
		}
		if i > 0 && x[i-1].end() >= e.off {
			t.Fatalf("extents %d and %d overlap or touch: [%d,%d) [%d,%d)", i-1, i, x[i-1].off, x[i-1].end(), e.off, e.end())
		}
	}
	var want int64
	var wantSize int64
	for i, p := range m.pending {
		if p {
			want++
			wantSize = int64(i) + 1
		}
	}
	if got := x.bytes(); got != want {
		t.Fatalf("bytes() = %d, want %d", got, want)
	}
	if got := x.size(); got != wantSize {
		t.Fatalf("size() = %d, want %d", got, wantSize)
	}
	got := make([]byte, len(m.data))
	x.overlay(got, 0)
	if !bytes.Equal(got, m.data) {
		t.Fatalf("overlay = %q, want %q", got, m.data)
	}
}

func TestExtents(t *testing.T) {
	type op struct {
		punch    bool
		off, end int64  // punch range
		data     string // write at off
	}
	w := func(off int64, s string) op { return op{off: off, data: s} }
	p := func(off, end int64) op { return op{punch: true, off: off, end: end} }
	tests := []struct {
		name    string
		ops     []op
		extents int // how many runs are left
	}{
		{"one write", []op{w(0, "hello")}, 1},
		{"appends merge", []op{w(0, "ab"), w(2, "cd"), w(4, "ef")}, 1},
		{"gap stays apart", []op{w(0, "ab"), w(5, "cd")}, 2},
		{"write fills the gap", []op{w(0, "ab"), w(5, "cd"), w(2, "xyz")}, 1},
		{"overwrite inside", []op{w(0, "aaaaaaaa"), w(2, "bb")}, 1},
		{"write before merges", []op{w(4, "cd"), w(0, "abcd")}, 1},
		{"write spans several", []op{w(0, "a"), w(3, "b"), w(6, "c"), w(0, "xxxxxxxx")}, 1},
		{"punch the middle", []op{w(0, "abcdefgh"), p(2, 4)}, 2},
		{"grow the left part after a punch", []op{w(0, "abcdefgh"), p(2, 4), w(2, "X")}, 2},
		{"truncate", []op{w(0, "abcdefgh"), w(10, "ij"), p(5, 1<<40)}, 1},
		{"punch everything", []op{w(0, "ab"), w(4, "cd"), p(0, 10)}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var x extents
			var m model
			for _, o := range tc.ops {
				if o.punch {
					x = x.punch(o.off, o.end)
					m.punch(o.off, o.end)
				} else {
					x = x.write(o.off, []byte(o.data))
					m.write(o.off, []byte(o.data))
				}
				m.check(t, x)
			}
			if len(x) != tc.extents {
				t.Errorf("%d extents, want %d", len(x), tc.extents)
			}
		})
	}
}

// TestExtentsRandom checks random writes and punches against the model,
// which catches buffers shared between runs or with the caller (the write
// buffer is reused, as FUSE reuses its request buffers).
func TestExtentsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var x extents
	var m model
	buf := make([]byte, 30)
	for i := range 5000 {
		off := r.Int64N(200)
		if r.IntN(5) == 0 {
			end := off + r.Int64N(40)
			x = x.punch(off, end)
			m.punch(off, end)
		} else {
			data := buf[:1+r.IntN(len(buf))]
			for k := range data {
				data[k] = byte('a' + (i+k)%26)
			}
			x = x.write(off, data)
			m.write(off, data)
		}
		m.check(t, x)
	}
}
