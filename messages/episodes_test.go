package messages

import (
	"bytes"
	"maps"
	"testing"
)

func TestEpisodeMsgID(t *testing.T) {
	for _, c := range []struct{ run, episode string }{
		{"run-7", "run-7-0"}, {"x/y", "x/y-z"}, {"x", "y-z"}, {"", "e"}, {"run.1", "ep.0001"}, {"run/7 α", "*"},
	} {
		id := EpisodeMsgID(c.run, c.episode)
		run, episode, err := ParseEpisodeMsgID(id)
		if err != nil || run != c.run || episode != c.episode {
			t.Errorf("ParseEpisodeMsgID(%q) = %q, %q, %v; want %q, %q", id, run, episode, err, c.run, c.episode)
		}
	}
	for _, bad := range []string{"", "bare-episode", "a.b.c", "a.%zz"} {
		if _, _, err := ParseEpisodeMsgID(bad); err == nil {
			t.Errorf("ParseEpisodeMsgID(%q) accepted", bad)
		}
	}
}

func TestParseEpisodes(t *testing.T) {
	s := NewSubjects("a.b")
	run, env, err := s.ParseEpisodes(s.Episodes("run/7 α", "math:gsm8k"))
	if err != nil || run != "run/7 α" || env != "math:gsm8k" {
		t.Fatalf("got %q, %q, %v", run, env, err)
	}
	for _, bad := range []string{"a.b.episodes.r", "a.b.episodes.r.e.x", "rf.episodes.r.e", "a.b.steps.r.e", "a.b.episodes.%zz.e"} {
		if _, _, err := s.ParseEpisodes(bad); err == nil {
			t.Errorf("ParseEpisodes(%q) accepted", bad)
		}
	}
}

func TestPeekStrings(t *testing.T) {
	req := sampleEpisode()
	req.RunID, req.TraceID = "r", "0af7651916cd43dd8448eb211c80319c"
	data, err := Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"rid", "id", "g", "e", "tid", "ml"}
	all := map[string]string{"rid": "r", "id": req.EpisodeID, "g": req.GroupID, "e": req.Env, "tid": req.TraceID}
	for _, c := range []struct {
		name string
		data []byte
		want map[string]string
	}{
		{"whole", data, all},
		{"trailing bytes", append(bytes.Clone(data), 0xc1), all},
		{"cut in the middle", data[:len(data)/2], map[string]string{"rid": "r", "id": req.EpisodeID, "g": req.GroupID, "e": req.Env}},
		{"not a map", []byte{0x92, 0xa1, 'x', 0xa1, 'y'}, map[string]string{}},
		{"a key that is no string", []byte{0x82, 0x01, 0xa1, 'x', 0xa2, 'i', 'd', 0xa1, 'y'}, map[string]string{}},
		{"nested too deep", append(append([]byte{0x82, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 64)...), 0xc0, 0xa2, 'i', 'd', 0xa1, 'y'), map[string]string{}},
		{"empty", nil, map[string]string{}},
	} {
		if got := PeekStrings(c.data, keys...); !maps.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// FuzzPeekStrings: PeekStrings never panics and returns only keys asked for.
func FuzzPeekStrings(f *testing.F) {
	data, err := Marshal(sampleEpisode())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)/3])
	f.Fuzz(func(t *testing.T, data []byte) {
		for k := range PeekStrings(data, "id", "rid") {
			if k != "id" && k != "rid" {
				t.Fatalf("key %q not asked for", k)
			}
		}
	})
}
