package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLedgerMarkFinished: a resumed ledger knows whether its run was
// marked finished, and the mark is no episode.
func TestLedgerMarkFinished(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out.jsonl")
	l, err := OpenLedger(out, "r", false)
	if err != nil {
		t.Fatal(err)
	}
	l.addEpisode(0)
	l.addEpisode(4)
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(false); err != nil {
		t.Fatal(err)
	}
	for _, mark := range []bool{false, true} {
		l, err := OpenLedger(out, "r", true)
		if err != nil {
			t.Fatal(err)
		}
		if l.Finished() != mark {
			t.Errorf("marked %v: Finished() = %v", mark, l.Finished())
		}
		if l.Episodes() != 2 || !l.Episode(0) || !l.Episode(4) {
			t.Errorf("marked %v: %d episodes written, want 0 and 4", mark, l.Episodes())
		}
		if !mark {
			if err := l.MarkFinished(); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSaveManifestReplaces: a manifest saved again replaces the first,
// and no temporary file is left beside it.
func TestSaveManifestReplaces(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	for _, episodes := range []int{8, 16} {
		if err := SaveManifest(out, Manifest{RunID: "r", Episodes: episodes, NSamples: 2}); err != nil {
			t.Fatal(err)
		}
		m, err := LoadManifest(out, "r")
		if err != nil {
			t.Fatal(err)
		}
		if m.Episodes != episodes {
			t.Errorf("manifest holds %d episodes, want %d", m.Episodes, episodes)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || !strings.HasSuffix(entries[0].Name(), ".run.json") {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files beside the output: %v, want the manifest only", names)
	}
	if err := RemoveManifest(out, "r"); err != nil {
		t.Fatal(err)
	}
}
