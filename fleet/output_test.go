package fleet

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOutputReplacesOnlyWhenKept: an output that is not kept leaves the
// file at its path as it was; a kept one replaces it, with its mode. No
// temporary file is left either way.
func TestOutputReplacesOnlyWhenKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(path, []byte("earlier\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("%s holds %q (%v), want %q", path, got, err, want)
		}
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 1 {
			t.Fatalf("directory holds %v (%v), want only the output", entries, err)
		}
	}

	o, err := CreateOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("discarded\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(false); err != nil {
		t.Fatal(err)
	}
	check("earlier\n")

	o, err = CreateOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(true); err != nil {
		t.Fatal(err)
	}
	check("new\n")
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v (%v), want the replaced file's 0640", st.Mode(), err)
	}

	// A symlink is followed: the file it points to is replaced.
	link := filepath.Join(t.TempDir(), "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	o, err = CreateOutput(link)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Write([]byte("via link\n")); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(true); err != nil {
		t.Fatal(err)
	}
	check("via link\n")
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
}

// TestOutputInMissingDirFailsEarly: a path that cannot be written fails
// when the output is created, before any run.
func TestOutputInMissingDirFailsEarly(t *testing.T) {
	if _, err := CreateOutput(filepath.Join(t.TempDir(), "no", "such", "out.jsonl")); err == nil {
		t.Fatal("created an output in a missing directory")
	}
}
