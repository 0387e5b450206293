package main

// TestCommandsOnBadDirsFailCleanly runs every subcommand that takes --dir
// against damaged logs, directories that hold no log, a path that does not
// exist, /etc and a regular file, through the real binary, and checks what
// any user may rely on:
//
//   - the exit status is 0, 1 or 2, and standard error never shows a panic,
//     a fatal runtime error, a goroutine dump or a fault (SIGBUS, SIGSEGV);
//   - no error line stutters ("pagelog read: pagelog: ...");
//   - read, dump and verify change no file (the tree is hashed before and
//     after), and dump --json prints one valid JSON object per line;
//   - verify and recover of a directory that holds no log fail with exit 1
//     and create nothing.
//
// Run: go test -count=1 -run TestCommandsOnBadDirs ./cmd/pagelog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
)

// badDirCase is one --dir to try.
type badDirCase struct {
	name   string
	dir    string
	hasLog bool // holds a log (damaged or not)
	system bool // a system directory: never written to, hashed shallowly
}

func TestCommandsOnBadDirsFailCleanly(t *testing.T) {
	start := time.Now()
	bin := pagelogBinary(t)
	root := t.TempDir()
	tpl, unclean := badDirTemplate(t, root)
	bases := segmentBases(t, tpl)
	if len(bases) < 5 {
		t.Fatalf("template has %d segments", len(bases))
	}
	seg := func(i int, suffix string) string { return fmt.Sprintf("%020d%s", bases[i], suffix) }
	newest := len(bases) - 1
	damaged := []struct {
		name   string
		damage func(dir string) error
	}{
		{"undamaged", func(string) error { return nil }},
		{"flip in a sealed segment", func(d string) error { return flipByte(filepath.Join(d, seg(1, ".log")), -1) }},
		{"flip in the first 16 bytes of the newest segment", func(d string) error { return flipByte(filepath.Join(d, seg(newest, ".log")), 9) }},
		{"middle .log removed", func(d string) error { return os.Remove(filepath.Join(d, seg(newest/2, ".log"))) }},
		{"newest .log removed", func(d string) error { return os.Remove(filepath.Join(d, seg(newest, ".log"))) }},
		{"newest .log cut to 100 bytes", func(d string) error { return os.Truncate(filepath.Join(d, seg(newest, ".log")), 100) }},
		{"sealed .log renamed to base+7", func(d string) error {
			return os.Rename(filepath.Join(d, seg(2, ".log")), filepath.Join(d, fmt.Sprintf("%020d.log", bases[2]+7)))
		}},
		{"newest .log renamed to base+7", func(d string) error {
			return os.Rename(filepath.Join(d, seg(newest, ".log")), filepath.Join(d, fmt.Sprintf("%020d.log", bases[newest]+7)))
		}},
		{"garbage appended to a sealed .log", func(d string) error { return appendGarbage(filepath.Join(d, seg(1, ".log"))) }},
		{"time index flipped", func(d string) error { return flipByte(filepath.Join(d, seg(newest, ".timeindex")), 1) }},
		{"log.meta removed", func(d string) error { return os.Remove(filepath.Join(d, "log.meta")) }},
		{"log.clean flipped", func(d string) error { return flipByte(filepath.Join(d, "log.clean"), 20) }},
		{"stray index file", func(d string) error {
			return os.WriteFile(filepath.Join(d, fmt.Sprintf("%020d.index", 99999)), make([]byte, 16), 0o600)
		}},
		{"LOCK is a directory", func(d string) error {
			_ = os.Remove(filepath.Join(d, "LOCK"))
			return os.Mkdir(filepath.Join(d, "LOCK"), 0o700)
		}},
	}
	var cases []badDirCase
	for i, d := range damaged {
		src := tpl
		if i == 0 {
			cases = append(cases, badDirCase{name: "unclean (copied while a writer was open)", dir: unclean, hasLog: true})
		}
		dir := filepath.Join(root, fmt.Sprintf("damaged-%02d", i))
		copyLogTree(t, src, dir)
		if err := d.damage(dir); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		cases = append(cases, badDirCase{name: d.name, dir: dir, hasLog: true})
	}
	empty := filepath.Join(root, "empty")
	notes := filepath.Join(root, "notes")
	file := filepath.Join(root, "file.txt")
	for _, d := range []string{empty, notes} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(notes, "notes.txt"), []byte("not a log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("a regular file, not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases = append(cases,
		badDirCase{name: "empty directory", dir: empty},
		badDirCase{name: "directory holding notes.txt", dir: notes},
		badDirCase{name: "path that does not exist", dir: filepath.Join(root, "missing", "log")},
		badDirCase{name: "/etc", dir: "/etc", system: true},
		badDirCase{name: "regular file as --dir", dir: file},
	)

	readOnly := [][]string{
		{"read", "--offset", "0"},
		{"read", "--offset", "18446744073709551615"},
		{"dump"},
		{"dump", "--json"},
		{"verify"},
	}
	writing := [][]string{
		{"recover"},
		{"recover", "--truncate-at-damage"},
		{"append"},
	}
	runs := 0
	for ci, c := range cases {
		for _, args := range readOnly {
			runs++
			before := badDirTreeHash(t, c)
			r := execCommand(t, bin, c.dir, args)
			checkCommandRun(t, c, args, r)
			if after := badDirTreeHash(t, c); after != before {
				t.Errorf("%s: pagelog %s changed the directory (a read-only command)", c.name, strings.Join(args, " "))
			}
			if args[0] == "verify" && !c.hasLog && r.code != 1 {
				t.Errorf("%s: pagelog verify: exit %d, want 1 (no log here)\n%s", c.name, r.code, r.stderr)
			}
			if len(args) > 1 && args[1] == "--json" {
				for i, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
					if line != "" && !json.Valid([]byte(line)) {
						t.Errorf("%s: pagelog dump --json: line %d is not JSON: %q", c.name, i+1, line)
						break
					}
				}
			}
		}
		for wi, args := range writing {
			if c.system && args[0] == "append" && os.Geteuid() == 0 {
				// As root, `pagelog append --dir /etc` would create a
				// log in /etc: not something a test may do.
				continue
			}
			runs++
			dir := c.dir
			if c.hasLog { // each writing command gets its own copy
				dir = filepath.Join(root, fmt.Sprintf("w-%02d-%d", ci, wi))
				copyLogTree(t, c.dir, dir)
			}
			cc := c
			cc.dir = dir
			before := badDirTreeHash(t, cc)
			r := execCommand(t, bin, dir, args)
			checkCommandRun(t, cc, args, r)
			if args[0] == "recover" && !c.hasLog {
				if r.code != 1 {
					t.Errorf("%s: pagelog %s: exit %d, want 1 (no log here)\n%s", c.name, strings.Join(args, " "), r.code, r.stderr)
				}
				if after := badDirTreeHash(t, cc); after != before {
					t.Errorf("%s: pagelog %s created or changed files where there is no log", c.name, strings.Join(args, " "))
				}
			}
			if args[0] == "append" && c.name == "regular file as --dir" {
				if after := badDirTreeHash(t, cc); after != before {
					t.Errorf("%s: pagelog append changed the file", c.name)
				}
			}
		}
	}
	t.Logf("%d directories, %d runs of the binary, in %v", len(cases), runs, time.Since(start).Round(time.Millisecond))
}

// badDirTemplate writes a closed log of a few hundred records in 8 KiB
// segments, and a copy of it taken while the writer was still open.
func badDirTemplate(t *testing.T, root string) (string, string) {
	t.Helper()
	dir := filepath.Join(root, "template")
	// SyncInterval, so that the checkpointer writes log.recovery (once a
	// second): the recovery rules of the newest segment then apply.
	l, err := engine.Open(dir, engine.Options{SegmentBytes: 8192, IndexIntervalBytes: 256, MaxRecordBytes: 8000,
		Sync: engine.SyncInterval, SyncInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		body := bytes.Repeat([]byte{byte('a' + i%26)}, i*37%700)
		if _, err := l.Append(body); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "log.recovery")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no log.recovery after 5 s")
		}
	}
	unclean := filepath.Join(root, "unclean")
	copyLogTree(t, dir, unclean)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, unclean
}

func segmentBases(t *testing.T, dir string) []uint64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var bases []uint64
	for _, e := range entries {
		var b uint64
		if n, _ := fmt.Sscanf(e.Name(), "%020d.log", &b); n == 1 && len(e.Name()) == 24 && strings.HasSuffix(e.Name(), ".log") {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	return bases
}

// copyLogTree copies the regular files of src into dst.
func copyLogTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := os.Mkdir(filepath.Join(dst, e.Name()), 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// flipByte flips a byte of a file: at pos, or in the middle when pos < 0.
func flipByte(path string, pos int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if pos < 0 {
		pos = len(b) / 2
	}
	b[pos] ^= 0x5a
	return os.WriteFile(path, b, 0o600)
}

func appendGarbage(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	g := make([]byte, 100)
	for i := range g {
		g[i] = byte(i*7 + 1)
	}
	_, err = f.Write(g)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// badDirTreeHash is a fingerprint of what is at c.dir: the whole tree (names,
// modes, sizes, times, contents), a shallow listing for a system
// directory, or "absent".
func badDirTreeHash(t *testing.T, c badDirCase) string {
	t.Helper()
	st, err := os.Lstat(c.dir)
	if err != nil {
		return "absent"
	}
	if !st.IsDir() {
		b, err := os.ReadFile(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("file %v %d %v %x", st.Mode(), st.Size(), st.ModTime(), b)
	}
	if c.system {
		entries, err := os.ReadDir(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		var parts []string
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %v %d %v", e.Name(), info.Mode(), info.Size(), info.ModTime()))
		}
		sort.Strings(parts)
		return strings.Join(parts, "\n")
	}
	return testkit.DirDigest(t, c.dir, testkit.HashOptions{Tree: true, ModTimes: true})
}

type cmdResult struct {
	code           int
	stdout, stderr string
	timedOut       bool
}

// execCommand runs `pagelog <args[0]> --dir dir <args[1:]...>` with empty
// standard input.
func execCommand(t *testing.T, bin, dir string, args []string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	full := append([]string{args[0], "--dir", dir}, args[1:]...)
	cmd := exec.CommandContext(ctx, bin, full...)
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cmdResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), timedOut: ctx.Err() != nil}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("pagelog %s: %v", strings.Join(full, " "), err)
	}
	return r
}

var (
	crashOutput   = regexp.MustCompile(`panic|fatal error|goroutine |SIGBUS|SIGSEGV`)
	stutteredLine = regexp.MustCompile(`^pagelog [a-z]+: (.*)$`)
)

// checkCommandRun checks what every run must satisfy.
func checkCommandRun(t *testing.T, c badDirCase, args []string, r cmdResult) {
	t.Helper()
	what := fmt.Sprintf("%s: pagelog %s", c.name, strings.Join(args, " "))
	if r.timedOut {
		t.Errorf("%s: did not finish in 20 s", what)
		return
	}
	if r.code < 0 || r.code > 2 {
		t.Errorf("%s: exit status %d, want 0, 1 or 2\nstderr: %s", what, r.code, trimOutput(r.stderr))
	}
	if m := crashOutput.FindString(r.stderr); m != "" {
		t.Errorf("%s: standard error shows %q:\n%s", what, m, trimOutput(r.stderr))
	}
	for _, line := range strings.Split(r.stderr, "\n") {
		m := stutteredLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if strings.HasPrefix(m[1], "pagelog") || strings.Contains(m[1], "pagelog: ") {
			t.Errorf("%s: the error line stutters: %q", what, line)
		}
	}
}

// trimOutput keeps the first lines of s.
func trimOutput(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 8 {
		lines = append(lines[:8], "...")
	}
	return "    " + strings.Join(lines, "\n    ")
}
