package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestServeRaftArgs(t *testing.T) {
	for _, c := range []struct {
		in, out []string
		ok      bool
	}{
		{[]string{"--raft", "--id", "n1"}, []string{"--id", "n1"}, true},
		{[]string{"--id", "n1", "-raft"}, []string{"--id", "n1"}, true},
		{[]string{"--raft=true", "--dir", "d"}, []string{"--dir", "d"}, true},
		{[]string{"--dir", "d", "--listen", ":1"}, nil, false},
		{[]string{"--dir", "d", "--", "--raft"}, nil, false},
		{[]string{"--raft=false", "--dir", "d"}, nil, false},
	} {
		in := slices.Clone(c.in)
		out, ok := raftArgs(in)
		if ok != c.ok || !slices.Equal(out, c.out) || !slices.Equal(in, c.in) {
			t.Errorf("raftArgs(%q) = %q, %v; want %q, %v (and the input untouched)", c.in, out, ok, c.out, c.ok)
		}
	}
}

// fakeNode writes a pagelog-raft into dir that prints its pid and
// arguments, copies its stdin, and exits with status 7.
func fakeNode(t *testing.T, dir string) {
	t.Helper()
	script := "#!/bin/sh\necho \"pid $$\"\necho \"args $*\"\nwhile read -r l; do echo \"$l\"; done\necho oops >&2\nexit 7\n"
	if err := os.WriteFile(filepath.Join(dir, raftNodeCommand), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// In-process (streams that are not the process's own), serve --raft runs
// the node as a child found on PATH, with the other flags, its stdin and
// its exit status.
func TestServeRaftChild(t *testing.T) {
	dir := t.TempDir()
	fakeNode(t, dir)
	t.Setenv("PATH", dir)
	r := runCmd(t, "from stdin\n", "serve", "--id", "n1", "--raft", "--peers", "n1=127.0.0.1:1")
	if r.code != 7 || !strings.Contains(r.stdout, "args --id n1 --peers n1=127.0.0.1:1\nfrom stdin\n") || r.stderr != "oops\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestServeRaftMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	r := runCmd(t, "", "serve", "--raft", "--id", "n1")
	if r.code != 1 || !strings.Contains(r.stderr, "pagelog-raft is neither beside this pagelog nor on PATH") ||
		!strings.Contains(r.stderr, "make raft") || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Without --raft, serve is the metrics server it was.
	if r := runCmd(t, "", "serve", "--dir", t.TempDir()); r.code != 1 || !strings.Contains(r.stderr, "no log") {
		t.Fatalf("serve without --raft: exit %d, %q", r.code, r.stderr)
	}
	if r := runCmd(t, "", "serve", "--help"); !strings.Contains(r.stderr, "--raft") || !strings.Contains(r.stderr, "/metrics") {
		t.Fatalf("serve --help lacks --raft:\n%s", r.stderr)
	}
}

// From the command line, the binary finds pagelog-raft beside itself
// (before PATH) and replaces itself with it: same pid, its exit status.
func TestServeRaftBinaryExec(t *testing.T) {
	bin := pagelogBinary(t)
	dir := t.TempDir()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "pagelog")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	fakeNode(t, dir)
	onPath := t.TempDir()
	if err := os.WriteFile(filepath.Join(onPath, raftNodeCommand), []byte("#!/bin/sh\necho wrong one\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "serve", "--raft", "--id", "n2", "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "PATH="+onPath)
	cmd.Stdin = strings.NewReader("piped\n")
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("exit: %v; stdout %q", err, out)
	}
	want := fmt.Sprintf("pid %d\nargs --id n2 --http 127.0.0.1:0\npiped\n", cmd.Process.Pid)
	if string(out) != want || string(ee.Stderr) != "oops\n" {
		t.Fatalf("stdout %q, stderr %q; want %q", out, ee.Stderr, want)
	}
}
