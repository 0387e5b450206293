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

// TestDeadLetterDirThroughLinkDotDotIsResolvedAsTheSystemDoes: ".." after
// a symbolic link goes up from the link's target, as the system resolves
// the path when it creates the directory, not from the link's place: a
// dead-letter directory "link/../dead" whose link points into the queue's
// directory lies inside it and is refused. So is a dangling link into the
// queue's directory (the system would create its target), a link loop, and
// the default sibling "<dir>.dead" when it is a link to the queue's
// directory or into it. A refused directory is not created.
func TestDeadLetterDirThroughLinkDotDotIsResolvedAsTheSystemDoes(t *testing.T) {
	type paths struct{ root, dir, into, dangling, loop string }
	setup := func(t *testing.T) paths {
		root, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		p := paths{root: root, dir: filepath.Join(root, "q"), into: filepath.Join(root, "into"),
			dangling: filepath.Join(root, "dangling"), loop: filepath.Join(root, "loop")}
		if err := os.MkdirAll(filepath.Join(p.dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(p.dir, "sub"), p.into); err != nil {
			t.Skipf("no symbolic links here: %v", err)
		}
		for link, target := range map[string]string{p.dangling: filepath.Join(p.dir, "dead"), p.loop: p.loop} {
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	// The paths are joined with "/", not filepath.Join: Join would take
	// "link/.." away before the system sees it.
	for _, c := range []struct {
		name, why string
		dead      func(p paths) string
	}{
		{"dotdot after a link", "inside", func(p paths) string { return p.into + "/../dead" }},
		{"dotdot after a link, then a new directory", "inside", func(p paths) string { return p.into + "/new/../../dead" }},
		{"dotdot after a link to the queue's own", "own", func(p paths) string { return p.into + "/.." }},
		{"a dangling link", "inside", func(p paths) string { return p.dangling }},
		{"a link loop", "link", func(p paths) string { return p.loop + "/dead" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := setup(t)
			dead := c.dead(p)
			q, err := Open(p.dir, Options{DeadLetterDir: dead})
			if err == nil {
				mustCloseQueue(t, q)
				t.Fatalf("Open(%s) with DeadLetterDir %s worked", p.dir, dead)
			}
			if !errors.Is(err, engine.ErrBadOptions) || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("Open(%s) with DeadLetterDir %s: %v, want ErrBadOptions saying %q", p.dir, dead, err, c.why)
			}
			if _, err := os.Stat(filepath.Join(p.dir, "dead")); err == nil {
				t.Fatalf("the refused dead-letter directory %s was created inside the queue's", dead)
			}
		})
	}
	t.Run("beside, through a link", func(t *testing.T) {
		p := setup(t)
		dead := p.into + "/../../beside"
		q, err := Open(p.dir, Options{DeadLetterDir: dead})
		if err != nil {
			t.Fatalf("DeadLetterDir %s (the sibling beside) refused: %v", dead, err)
		}
		mustCloseQueue(t, q)
		if ok, err := IsQueue(filepath.Join(p.root, "beside")); !ok || err != nil {
			t.Fatalf("the dead-letter queue is not in %s: %v %v", filepath.Join(p.root, "beside"), ok, err)
		}
	})
	for _, target := range []string{"the queue's own directory", "inside the queue's directory"} {
		t.Run("the default sibling a link to "+target, func(t *testing.T) {
			p := setup(t)
			to := p.dir
			if target != "the queue's own directory" {
				to = filepath.Join(p.dir, "sub")
			}
			sib := DeadLetterPath(p.dir)
			if err := os.Symlink(to, sib); err != nil {
				t.Fatal(err)
			}
			q, err := Open(p.dir, Options{MaxReceives: 2})
			if err == nil {
				mustCloseQueue(t, q)
				t.Fatalf("Open(%s) with its sibling %s a link to %s worked", p.dir, sib, to)
			}
			if !errors.Is(err, engine.ErrBadOptions) {
				t.Fatalf("Open(%s) with its sibling %s a link to %s: %v, want ErrBadOptions", p.dir, sib, to, err)
			}
		})
	}
}
