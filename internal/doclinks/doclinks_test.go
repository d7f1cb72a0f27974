package doclinks

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestCheckFixture runs Check over a module holding known good and broken
// links, in its package doc, a type's doc, and a comment inside a function.
func TestCheckFixture(t *testing.T) {
	broken, err := Check(filepath.Join("testdata", "mod"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range broken {
		got = append(got, filepath.Base(b.Pos.Filename)+":"+b.Link)
	}
	want := []string{
		"a.go:Gone", "a.go:A.Gone", "a.go:b.Gone", "a.go:b.B.Gone",
		"a.go:io.Gone", "a.go:nopkg.Thing", "a.go:Inner", "b.go:B.Gone",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("broken links:\n got %q\nwant %q", got, want)
	}
}

// TestModuleDocLinks fails on every doc link in jaild's own comments that
// names nothing.
func TestModuleDocLinks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	broken, err := Check(root, []string{"seccomp", "urfave_cli_no_docs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Error(b)
	}
}
