package queue

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/engine"
)

// TestDeadLetterDirInsideOrAboveTheQueueIsRefused: a dead-letter
// directory inside the queue's directory, or one that holds it, is refused
// with ErrBadOptions, whether it is named directly, through a relative
// path or "..", or through a symbolic link; directories beside the queue's
// (a sibling whose name starts with the queue's too) are accepted.
func TestDeadLetterDirInsideOrAboveTheQueueIsRefused(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relative := func(p string) string {
		r, err := filepath.Rel(cwd, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	type refused struct{ name, dir, dead, why string }
	cases := []refused{
		{"inside", dir, filepath.Join(dir, "dead"), "inside"},
		{"deep inside", dir, filepath.Join(dir, "a", "b", "dead"), "inside"},
		{"relative, inside", dir, relative(filepath.Join(dir, "dead")), "inside"},
		{"through dotdot", dir, filepath.Join(dir, "x", "..", "dead"), "inside"},
		{"the parent", dir, root, "holds"},
		{"relative, the parent", relative(dir), relative(root), "holds"},
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(dir, link); err == nil {
		cases = append(cases,
			refused{"through a link", dir, filepath.Join(link, "dead"), "inside"},
			refused{"the queue through a link", link, filepath.Join(dir, "dead"), "inside"},
			refused{"the queue's own, through a link", dir, link, "own"})
	} else {
		t.Logf("no symbolic links here (%v): the cases through one are left out", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, err := Open(c.dir, Options{DeadLetterDir: c.dead})
			if err == nil {
				mustCloseQueue(t, q)
				t.Fatalf("Open(%s) with DeadLetterDir %s worked", c.dir, c.dead)
			}
			if !errors.Is(err, engine.ErrBadOptions) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("Open(%s) with DeadLetterDir %s: %v, want ErrBadOptions saying %q", c.dir, c.dead, err, c.why)
			}
		})
	}
	for _, dead := range []string{filepath.Join(root, "q.dead"), filepath.Join(root, "qq"), relative(filepath.Join(root, "q-dead"))} {
		q, err := Open(dir, Options{DeadLetterDir: dead})
		if err != nil {
			t.Fatalf("DeadLetterDir %s beside the queue: %v", dead, err)
		}
		mustCloseQueue(t, q)
	}
}
