package main

// `pagelog queue send|receive|delete|stats` keep the promises of README.md
// ("The work queue") against misuse: each test tries one through the real
// binary or the in-process entry point, and fails when it breaks. Run:
//
//	go test -count=1 -run TestQueueCLI ./cmd/pagelog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/queue"
)

// hqHangLimit is how long a run of the binary may take before it is
// called hung: a hang detector, not a speed test (a run that finishes
// returns at once). Some runs do work in proportion to the queue: `queue
// stats` walks every segment of the message log, mapping each one twice,
// and TestQueueCLIStatsBesideOwner gives it about 1,900 segments of
// 64 KiB, where one run took 5 to 11 s beside two busy loops and more than
// 20 s in a whole-suite run.
const hqHangLimit = 2 * time.Minute

// hqExec runs the binary with args and stdin, with a timeout.
func hqExec(t *testing.T, bin, stdin string, args ...string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hqHangLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("pagelog %s: %v", strings.Join(args, " "), err)
	}
	return cmdResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), timedOut: ctx.Err() != nil}
}

var hqPrefix = regexp.MustCompile(`^pagelog queue [a-z]+: (.*)$`)

// hqCheck checks what every run of a queue command must satisfy: exit 0,
// 1 or 2; no panic, fatal error, goroutine dump or fault; an error is one
// line "pagelog queue <cmd>: <message>" that does not stutter.
func hqCheck(t *testing.T, what string, r cmdResult) {
	t.Helper()
	if r.timedOut {
		t.Errorf("%s: did not finish in %v", what, hqHangLimit)
		return
	}
	if r.code < 0 || r.code > 2 {
		t.Errorf("%s: exit status %d, want 0, 1 or 2\nstderr: %s", what, r.code, trimOutput(r.stderr))
	}
	if m := crashOutput.FindString(r.stderr); m != "" {
		t.Errorf("%s: standard error shows %q:\n%s", what, m, trimOutput(r.stderr))
	}
	if r.code == 1 {
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(lines) != 1 {
			t.Errorf("%s: exit 1 with %d lines on stderr, want one:\n%s", what, len(lines), trimOutput(r.stderr))
		}
		for _, line := range lines {
			m := hqPrefix.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: error line %q is not \"pagelog queue <command>: ...\"", what, line)
				continue
			}
			if strings.Contains(m[1], "pagelog: ") || strings.HasPrefix(m[1], "pagelog") {
				t.Errorf("%s: the error line stutters: %q", what, line)
			}
		}
	}
}

// hqTree fingerprints path: names, modes, sizes, times and a hash of the
// contents of everything under it, or "absent".
func hqTree(t *testing.T, path string) string {
	t.Helper()
	if _, err := os.Lstat(path); err != nil {
		return "absent"
	}
	h := sha256.New()
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d %v\n", p, info.Mode(), info.Size(), info.ModTime().UnixNano())
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hqQueue makes a queue in dir (64 KiB segments, so that copies and hashes
// of it are cheap; the CLI uses the stored setting) with lines sent.
func hqQueue(t *testing.T, dir string, lines ...string) {
	t.Helper()
	q, err := queue.Open(dir, queue.Options{Log: engine.Options{SegmentBytes: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, strings.Join(lines, "\n")+"\n", "queue", "send", "--dir", dir)
}

// hqPlainLog makes a plain log (not a queue) in dir with one record.
func hqPlainLog(t *testing.T, dir string) {
	t.Helper()
	l, err := engine.Open(dir, engine.Options{SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("a record of a plain log")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestQueueCLISendCreatesOnlyWhereAllowed: "Only send creates a queue (in a
// new or empty directory whose parent exists)". Anywhere else it fails,
// changes nothing and creates nothing.
func TestQueueCLISendCreatesOnlyWhereAllowed(t *testing.T) {
	bin := pagelogBinary(t)
	root := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notes := mk("notes")
	os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("buy milk\n"), 0o600)
	hidden := mk("hidden")
	os.WriteFile(filepath.Join(hidden, ".keep"), nil, 0o600)
	plainLog := mk("plainlog")
	hqPlainLog(t, plainLog)
	onlyDeletes := mk("onlydeletes")
	hqPlainLog(t, filepath.Join(onlyDeletes, "deletes"))
	file := filepath.Join(root, "file.txt")
	os.WriteFile(file, []byte("a file\n"), 0o600)
	cases := []struct {
		name, dir string
		ok        bool
	}{
		{"a new directory whose parent exists", filepath.Join(root, "new"), true},
		{"an empty directory", mk("empty"), true},
		{"an existing queue", func() string { d := filepath.Join(root, "queue"); hqQueue(t, d, "first"); return d }(), true},
		{"a directory of notes", notes, false},
		{"a directory holding only a dot file", hidden, false},
		{"a plain log (not a queue)", plainLog, false},
		{"a directory holding only deletes/", onlyDeletes, false},
		{"a regular file", file, false},
		{"a path whose parent is missing", filepath.Join(root, "no", "such", "q"), false},
		{"a path whose parent is a file", filepath.Join(file, "q"), false},
		{"a path with a trailing slash whose parent is missing", filepath.Join(root, "nope", "q") + "/", false},
	}
	for _, c := range cases {
		parent := filepath.Dir(filepath.Clean(c.dir))
		before, beforeParent := hqTree(t, c.dir), hqTree(t, parent)
		r := hqExec(t, bin, "hello\n", "queue", "send", "--dir", c.dir)
		what := "queue send into " + c.name
		hqCheck(t, what, r)
		if c.ok {
			if r.code != 0 {
				t.Errorf("%s: exit %d, stderr %q", what, r.code, r.stderr)
			}
			continue
		}
		if r.code != 1 {
			t.Errorf("%s: exit %d, want 1 (refused); stdout %q stderr %q", what, r.code, r.stdout, r.stderr)
		}
		if after := hqTree(t, c.dir); after != before {
			t.Errorf("%s: the refused send changed or created %s", what, c.dir)
		}
		if before == "absent" && beforeParent != "absent" && hqTree(t, parent) != beforeParent {
			t.Errorf("%s: the refused send changed the parent directory", what)
		}
		if _, err := os.Stat(filepath.Join(root, "no")); err == nil {
			t.Fatalf("%s: send created missing parents", what)
		}
	}
}

// TestQueueCLIRefusesNonQueues: receive, delete and stats refuse every
// directory that holds no queue, with exit 1 and one clear line, and
// create or change nothing.
func TestQueueCLIRefusesNonQueues(t *testing.T) {
	bin := pagelogBinary(t)
	root := t.TempDir()
	mk := func(name string) string {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notes := mk("notes")
	os.WriteFile(filepath.Join(notes, "todo.txt"), []byte("buy milk\n"), 0o600)
	plainLog := mk("plainlog")
	hqPlainLog(t, plainLog)
	onlyDeletes := mk("onlydeletes")
	hqPlainLog(t, filepath.Join(onlyDeletes, "deletes"))
	deletesFile := filepath.Join(root, "deletesfile")
	hqQueue(t, deletesFile, "m")
	os.RemoveAll(filepath.Join(deletesFile, "deletes"))
	os.WriteFile(filepath.Join(deletesFile, "deletes"), []byte("not a directory"), 0o600)
	file := filepath.Join(root, "file.txt")
	os.WriteFile(file, []byte("a file\n"), 0o600)
	dirs := map[string]string{
		"missing":                         filepath.Join(root, "missing"),
		"missing parent":                  filepath.Join(root, "a", "b"),
		"empty":                           mk("empty"),
		"notes":                           notes,
		"plain log":                       plainLog,
		"only deletes/":                   onlyDeletes,
		"a queue whose deletes is a file": deletesFile,
		"a regular file":                  file,
	}
	for name, dir := range dirs {
		for _, args := range [][]string{
			{"receive"}, {"receive", "--wait", "10ms", "--json"}, {"delete", "--offset", "0"}, {"stats"}, {"stats", "--json"},
		} {
			full := append([]string{"queue", args[0], "--dir", dir}, args[1:]...)
			what := fmt.Sprintf("%s: pagelog %s", name, strings.Join(full, " "))
			before := hqTree(t, dir)
			r := hqExec(t, bin, "", full...)
			hqCheck(t, what, r)
			if r.code != 1 || r.stdout != "" {
				t.Errorf("%s: exit %d, stdout %q; want 1 and nothing", what, r.code, r.stdout)
			}
			if after := hqTree(t, dir); after != before {
				t.Errorf("%s: changed or created files", what)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "a")); err == nil {
		t.Error("a refused command created a missing parent")
	}
}

// TestQueueCLIStatsBesideOwner: while `pagelog queue receive --wait
// 60s` holds the queue open (with messages in flight in it), stats works,
// says what the files say, and changes no file; so do the refused writers
// (send, receive, delete), which name the owner. Then stats runs beside a
// `queue send` that keeps appending.
func TestQueueCLIStatsBesideOwner(t *testing.T) {
	bin := pagelogBinary(t)
	dir := filepath.Join(t.TempDir(), "q")
	hqQueue(t, dir, "m0", "m1", "m2", "m3", "m4")
	mustRun(t, "", "queue", "delete", "--dir", dir, "--offset", "2")
	owner := exec.Command(bin, "queue", "receive", "--dir", dir, "--count", "1000", "--wait", "60s", "--visibility", "1h")
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { owner.Process.Kill(); owner.Wait() }()
	br := bufio.NewReader(out)
	for range 4 { // every ready message is in flight in the owner now
		readLineTimeout(t, br, hqHangLimit)
	}
	time.Sleep(50 * time.Millisecond)
	before := hqTree(t, dir)
	for i := range 8 {
		args := []string{"queue", "stats", "--dir", dir}
		if i%2 == 1 {
			args = append(args, "--json")
		}
		r := hqExec(t, bin, "", args...)
		hqCheck(t, "stats beside the owner", r)
		if r.code != 0 {
			t.Fatalf("stats beside the owner: exit %d, stderr %q", r.code, r.stderr)
		}
		if i%2 == 1 {
			var o map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || o["end"] != 5.0 || o["messages"] != 4.0 || o["deleted"] != 1.0 {
				t.Errorf("stats --json beside the owner: %v %q", err, r.stdout)
			}
		} else if !strings.Contains(r.stdout, "end 5\n") || !strings.Contains(r.stdout, "messages 4\n") || !strings.Contains(r.stdout, "deleted 1\n") {
			t.Errorf("stats beside the owner:\n%s", r.stdout)
		}
	}
	for _, args := range [][]string{
		{"queue", "send", "--dir", dir}, {"queue", "receive", "--dir", dir}, {"queue", "delete", "--dir", dir, "--offset", "0"},
	} {
		r := hqExec(t, bin, "intruder\n", args...)
		hqCheck(t, strings.Join(args, " ")+" beside the owner", r)
		if r.code != 1 || !strings.Contains(r.stderr, "open in another process") {
			t.Errorf("%s beside the owner: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if after := hqTree(t, dir); after != before {
		t.Errorf("stats (or a refused writer) beside the owner changed the queue's files")
	}
	owner.Process.Kill()
	owner.Wait()

	// Beside a sender that keeps appending (and rolling segments).
	sender := exec.Command(bin, "queue", "send", "--dir", dir)
	in, err := sender.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	sender.Stdout = io.Discard
	if err := sender.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sender.Process.Kill(); sender.Wait() }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		line := strings.Repeat("s", 3000) + "\n"
		for i := 0; i < 40000; i++ {
			if _, err := io.WriteString(in, line); err != nil {
				return
			}
		}
		in.Close()
	}()
	last := uint64(0)
	for i := range 15 {
		r := hqExec(t, bin, "", "queue", "stats", "--dir", dir)
		hqCheck(t, "stats beside a sender", r)
		if r.code != 0 {
			t.Errorf("stats beside a sender (run %d): exit %d, stderr %q", i, r.code, r.stderr)
			continue
		}
		var end uint64
		fmt.Sscanf(r.stdout, "end %d", &end)
		if end < last {
			t.Errorf("stats beside a sender: end went back from %d to %d", last, end)
		}
		last = end
	}
	sender.Process.Kill()
	<-done
}

// hqUnescape undoes receive's escaping: \n, \t, \r, \\ and \xNN.
func hqUnescape(s string) ([]byte, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		if i+1 >= len(s) {
			return nil, fmt.Errorf("a lone backslash at the end")
		}
		i++
		switch s[i] {
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case 'r':
			b = append(b, '\r')
		case '\\':
			b = append(b, '\\')
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("a short \\x escape")
			}
			v, err := hex.DecodeString(s[i+1 : i+3])
			if err != nil {
				return nil, err
			}
			b = append(b, v[0])
			i += 2
		default:
			return nil, fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return b, nil
}

// TestQueueCLIReceiveRoundTripsBytes: every message is one line, and its
// escaped text, or its --json body, gives back the exact bytes sent: every
// single byte value, invalid UTF-8, escapes that look like escapes, an
// empty body, 64 KiB of random bytes and a body of about 1 MiB.
func TestQueueCLIReceiveRoundTripsBytes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	mustRun(t, "", "queue", "send", "--dir", dir) // creates the queue
	var bodies []string
	for c := range 256 {
		bodies = append(bodies, string([]byte{byte(c)}))
	}
	bodies = append(bodies, "", `\`, `\n`, `\x41`, "\\\n", "a\tb\tc", "\r\n", "\x1b[31mred\x1b[0m", "é", "\xc3", "\xed\xa0\x80",
		"\xf4\x90\x80\x80", "\u2028", "\ufeffbom", "tab\t\\t", strings.Repeat("\x00", 100))
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	bodies = append(bodies, string(big), strings.Repeat("large \\ body\t", 80000))
	sendBodies(t, dir, bodies...)
	n := strconv.Itoa(len(bodies))

	r := mustRun(t, "", "queue", "receive", "--dir", dir, "--count", n)
	if !strings.HasSuffix(r.stdout, "\n") || strings.Count(r.stdout, "\n") != len(bodies) {
		t.Fatalf("receive --count %s printed %d lines, want one per message", n, strings.Count(r.stdout, "\n"))
	}
	for i, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		off, text, ok := strings.Cut(line, "\t")
		if !ok || strings.ContainsAny(text, "\t\r") || off != strconv.Itoa(i) {
			t.Errorf("message %d: line %q is not offset<TAB>escaped body", i, trimLine(line))
			continue
		}
		got, err := hqUnescape(text)
		if err != nil || string(got) != bodies[i] {
			t.Errorf("message %d: %q unescapes to %q (%v), sent %q", i, trimLine(text), trimLine(string(got)), err, trimLine(bodies[i]))
		}
	}

	r = mustRun(t, "", "queue", "receive", "--dir", dir, "--count", n, "--json")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(bodies) {
		t.Fatalf("receive --json printed %d lines, want %d", len(lines), len(bodies))
	}
	for i, line := range lines {
		var o struct {
			Offset     *uint64 `json:"offset"`
			Receives   int     `json:"receives"`
			Deadline   string  `json:"deadline"`
			Body       *string `json:"body"`
			BodyBase64 *string `json:"body_base64"`
		}
		if err := json.Unmarshal([]byte(line), &o); err != nil || o.Offset == nil || *o.Offset != uint64(i) {
			t.Errorf("--json message %d: %v: %q", i, err, trimLine(line))
			continue
		}
		var got []byte
		switch {
		case o.Body != nil && o.BodyBase64 == nil:
			got = []byte(*o.Body)
		case o.BodyBase64 != nil && o.Body == nil:
			got, _ = base64.StdEncoding.DecodeString(*o.BodyBase64)
		default:
			t.Errorf("--json message %d: want exactly one of body and body_base64: %q", i, trimLine(line))
		}
		if string(got) != bodies[i] {
			t.Errorf("--json message %d: got %q, sent %q", i, trimLine(string(got)), trimLine(bodies[i]))
		}
		if _, err := time.Parse(time.RFC3339Nano, o.Deadline); err != nil || o.Receives != 1 {
			t.Errorf("--json message %d: receives %d, deadline %q", i, o.Receives, o.Deadline)
		}
	}
}

func trimLine(s string) string {
	if len(s) > 80 {
		return s[:80] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// TestQueueCLIReceiveDamagedRecordNotEmpty: a message whose record is damaged
// is handed out with an error (Queue.Receive says so). `queue receive`
// must not print it as if it were a message with an empty body: the text
// output has no other way to tell the two apart.
func TestQueueCLIReceiveDamagedRecordNotEmpty(t *testing.T) {
	bin := pagelogBinary(t)
	dir := filepath.Join(t.TempDir(), "q")
	hqQueue(t, dir, "first", "second message", "third", "")
	seg := filepath.Join(dir, "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("second message"))
	if i < 0 {
		t.Fatal("record not found")
	}
	b[i+3] ^= 0x20
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := hqExec(t, bin, "", "queue", "receive", "--dir", dir, "--count", "4")
	hqCheck(t, "receive of a damaged record", r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	damagedLooksEmpty := false
	for _, l := range lines {
		if l == "1\t" {
			damagedLooksEmpty = true
		}
	}
	if damagedLooksEmpty && r.code == 0 && !strings.Contains(r.stderr, "1") {
		t.Errorf("the damaged message 1 is printed as an empty body (%q), exit 0, nothing on stderr: indistinguishable from the real empty message 3\nstdout: %q", "1\t", r.stdout)
	}
	rj := hqExec(t, bin, "", "queue", "receive", "--dir", dir, "--count", "4", "--json")
	hqCheck(t, "receive --json of a damaged record", rj)
	for _, l := range strings.Split(strings.TrimSuffix(rj.stdout, "\n"), "\n") {
		var o map[string]any
		if json.Unmarshal([]byte(l), &o) != nil {
			t.Errorf("--json line %q", l)
			continue
		}
		if o["offset"] == 1.0 {
			e, _ := o["error"].(string)
			if e == "" {
				t.Errorf("--json: the damaged message carries no error: %q", l)
			}
			if strings.Count(e, "pagelog: ") > 1 {
				t.Errorf("--json: the damaged message's error stutters: %q", e)
			}
		}
	}
}

// TestQueueCLIExitCodesOnBadInput: odd arguments and damaged queues through
// the real binary: exit 0, 1 or 2 only, no crash, one clear error line.
func TestQueueCLIExitCodesOnBadInput(t *testing.T) {
	bin := pagelogBinary(t)
	root := t.TempDir()
	good := filepath.Join(root, "good")
	hqQueue(t, good, "a", "b", "c")
	damaged := map[string]func(dir string){
		"log.meta garbage": func(d string) { os.WriteFile(filepath.Join(d, "log.meta"), []byte("garbage"), 0o600) },
		"queue.head a directory": func(d string) {
			os.Remove(filepath.Join(d, "queue.head"))
			os.Mkdir(filepath.Join(d, "queue.head"), 0o700)
		},
		"LOCK a directory": func(d string) {
			os.Remove(filepath.Join(d, "LOCK"))
			os.Mkdir(filepath.Join(d, "LOCK"), 0o700)
		},
		"newest segment renamed": func(d string) {
			os.Rename(filepath.Join(d, "00000000000000000000.log"), filepath.Join(d, "00000000000000000007.log"))
		},
		"segment cut to 10 bytes": func(d string) { os.Truncate(filepath.Join(d, "00000000000000000000.log"), 10) },
	}
	argsFor := func(dir string) [][]string {
		return [][]string{
			{"queue", "receive", "--dir", dir, "--visibility", "1ns", "--count", "2"},
			{"queue", "receive", "--dir", dir, "--wait", "1ns", "--count", "5", "--json"},
			{"queue", "delete", "--dir", dir, "--offset", "18446744073709551615"},
			{"queue", "delete", "--dir", dir, "--offset", "1"},
			{"queue", "stats", "--dir", dir},
			{"queue", "stats", "--dir", dir, "--json"},
			{"queue", "send", "--dir", dir, "--sync", "always"},
		}
	}
	var runs int
	for name, damage := range damaged {
		for _, args := range argsFor("DIR") {
			dir := filepath.Join(root, fmt.Sprintf("d%d", runs))
			copyLogTree(t, good, dir)
			damage(dir)
			for i := range args {
				if args[i] == "DIR" {
					args[i] = dir
				}
			}
			runs++
			r := hqExec(t, bin, "line\n", args...)
			hqCheck(t, name+": pagelog "+strings.Join(args[:2], " ")+" "+strings.Join(args[4:], " "), r)
		}
	}
	for _, args := range [][]string{
		{"queue"}, {"queue", "help"}, {"queue", "--help"}, {"queue", "receive"}, {"queue", "receive", "--dir"},
		{"queue", "stats", "--dir", good, "extra"}, {"queue", "nope", "--dir", good},
		{"queue", "receive", "--dir", good, "--count", "99999999999999999999"},
		{"queue", "receive", "--dir", good, "--count", "-5"},
		{"queue", "receive", "--dir", good, "--visibility", "8761h"},
		{"queue", "receive", "--dir", good, "--bogus"},
		{"queue", "delete", "--dir", good, "--offset", "18446744073709551616"},
		{"queue", "delete", "--dir", good, "--offset", "-1"},
		{"queue", "send", "--dir", good, "--sync", "bogus"},
	} {
		runs++
		r := hqExec(t, bin, "", args...)
		hqCheck(t, "pagelog "+strings.Join(args, " "), r)
	}
	t.Logf("%d runs of the binary", runs)
}

// TestQueueCLIReadersBesideDeleter: `queue stats` and `verify` beside a
// process that sends, receives and deletes as fast as it can, with head
// checkpoints every 2 ms dropping segments of both logs: every run exits 0
// and reports no damage, no lost records and no lost offsets (nothing was
// lost: the queue is healthy), and stats never shows a head beyond the end.
func TestQueueCLIReadersBesideDeleter(t *testing.T) {
	if dir := os.Getenv("PAGELOG_QUEUE_DELETER_DIR"); dir != "" {
		hqDeleterChild(dir)
		return
	}
	bin := pagelogBinary(t)
	dir := filepath.Join(t.TempDir(), "q")
	hqQueue(t, dir, "first")
	child := testkit.Child("TestQueueCLIReadersBesideDeleter")
	child.Env = append(os.Environ(), "PAGELOG_QUEUE_DELETER_DIR="+dir)
	var childErr bytes.Buffer
	child.Stderr = &childErr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	readLineTimeout(t, bufio.NewReader(out), hqHangLimit) // it runs
	go func() { child.Wait(); close(exited) }()
	defer func() { child.Process.Kill(); <-exited }()
	startHead, _ := strconv.ParseUint(statsOf(t, dir)["head"], 10, 64)
	stop := time.Now().Add(2 * time.Second)
	runs, bad := 0, 0
	for time.Now().Before(stop) && bad < 5 {
		runs++
		args := []string{"queue", "stats", "--dir", dir}
		if runs%2 == 0 {
			args = []string{"verify", "--dir", dir}
		}
		r := hqExec(t, bin, "", args...)
		if args[0] == "queue" {
			hqCheck(t, "stats beside a deleter", r)
		}
		var end, head uint64
		fmt.Sscanf(r.stdout[strings.Index(r.stdout, "end "):], "end %d\nhead %d", &end, &head)
		if r.code != 0 || strings.Contains(r.stdout, "NOT healthy") || regexp.MustCompile(`(damaged_delete_records|damaged_receive_records|deletes_lost|receives_lost|lost_offsets)[: ]+[1-9]`).MatchString(r.stdout) ||
			(args[0] == "queue" && (!strings.Contains(r.stdout, `checkpoint_error "none"`) || head > end)) {
			bad++
			t.Errorf("pagelog %s beside a deleter (run %d): exit %d\nstdout:\n%s\nstderr: %s", strings.Join(args[:2], " "), runs, r.code, r.stdout, r.stderr)
		}
	}
	// The deleter must still run, and must have deleted beside the readers:
	// the head moves past where it was when they started.
	var st map[string]string
	for deadline := time.Now().Add(hqHangLimit); ; {
		select {
		case <-exited:
			t.Fatalf("the deleter stopped: %v\n%s", child.ProcessState, childErr.String())
		default:
		}
		st = statsOf(t, dir)
		if head, _ := strconv.ParseUint(st["head"], 10, 64); head > startHead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleter made no progress in %v: head still %s (was %d)", hqHangLimit, st["head"], startHead)
		}
		time.Sleep(20 * time.Millisecond) // between polls of a condition
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "deletes", "*.log"))
	t.Logf("%d runs of stats and verify beside the deleter; at the end: end %s, head %s, %d delete-log segments", runs, st["end"], st["head"], len(segs))
}

// hqDeleterChild sends, receives and deletes in dir until killed.
func hqDeleterChild(dir string) {
	q, err := queue.Open(dir, queue.Options{Log: engine.Options{SegmentBytes: 8 << 10}, CheckpointInterval: 2 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println("running")
	body := []byte(strings.Repeat("d", 40))
	for {
		for range 64 {
			if _, err := q.Send(body); err != nil {
				fmt.Fprintln(os.Stderr, "send:", err)
				os.Exit(4)
			}
		}
		for range 64 {
			m, ok, err := q.TryReceive()
			if err != nil || !ok {
				fmt.Fprintln(os.Stderr, "receive:", ok, err)
				os.Exit(5)
			}
			if err := q.Delete(m.Offset); err != nil {
				fmt.Fprintln(os.Stderr, "delete:", err)
				os.Exit(6)
			}
		}
	}
}
