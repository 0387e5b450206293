// Command manyqueues measures what keeping many queues costs in pagelog and
// in its peers: for each number of queues and each system, a child process
// creates the queues (each with a first 100-byte message), reads what the
// process then holds (resident memory, descriptors, mappings, goroutines),
// sends 1 KiB messages round-robin over all the queues for a while, receives
// and deletes them round-robin for as long, closes, and measures the data
// directory with du; a second child opens the same data again and touches
// every queue (the reopen). Each system runs in processes of its own, so the
// figures are its alone.
//
//	manyqueues [-queues 1000,10000] [-systems a,b] [-spread 1s] [-dir D] [-budget 2m] [-timeout 10m] [-nofile N] [-json F]
//
// A system that cannot reach a number of queues (a descriptor or mapping
// limit, an error) gives a row that says where it stopped and why. The
// table is Markdown, on standard output; progress goes to standard error.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run())
}

func run() int {
	queues := flag.String("queues", "1000,10000", "comma-separated `numbers` of queues")
	only := flag.String("systems", "", "comma-separated system `names` to run (default all in this build)")
	spread := flag.Duration("spread", time.Second, "how long the spread send runs, and the spread receive")
	dir := flag.String("dir", os.TempDir(), "scratch `directory` on the disk to measure (a subdirectory is made and removed)")
	timeout := flag.Duration("timeout", 10*time.Minute, "longest a child may run")
	budget := flag.Duration("budget", 2*time.Minute, "longest the making of the queues may take in a child (0: no limit); a system over it stops there")
	jsonOut := flag.String("json", "", "also write every result as JSON to this `file`")
	nofile := flag.Uint64("nofile", 0, "cap the descriptor limit of the children at `n` (default: the hard limit)")
	child := flag.String("child", "", "internal: run one phase of this system in this process")
	phase := flag.String("phase", phaseCreate, "internal: the child's phase")
	flag.Parse()

	var ns []int
	for _, f := range strings.Split(*queues, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "manyqueues: bad -queues %q\n", *queues)
			return 2
		}
		ns = append(ns, n)
	}
	cfg := config{spread: *spread, timeout: *timeout, budget: *budget, nofile: *nofile}
	if *child != "" {
		return runAsChild(*child, *phase, ns[0], *dir, cfg)
	}
	syss := selectSystems(*only)
	if len(syss) == 0 {
		fmt.Fprintln(os.Stderr, "manyqueues: no system selected")
		return 2
	}
	scratch, err := os.MkdirTemp(*dir, "manyqueues-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "manyqueues:", err)
		return 1
	}
	defer os.RemoveAll(scratch)

	start := time.Now()
	var rows []row
	for _, n := range ns {
		for _, s := range syss {
			fmt.Fprintf(os.Stderr, "manyqueues %5.0fs  %d queues  %s\n", time.Since(start).Seconds(), n, s.name)
			rows = append(rows, measure(s, n, scratch, cfg))
		}
	}
	fmt.Print(table(rows, *spread))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rows, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "manyqueues:", err)
			return 1
		}
	}
	fmt.Fprintf(os.Stderr, "manyqueues: done in %.0f s\n", time.Since(start).Seconds())
	return 0
}

// selectSystems returns the systems of this build named in only, a
// comma-separated list (all of them when only is empty).
func selectSystems(only string) []*system {
	want := make(map[string]bool)
	for _, name := range strings.Split(only, ",") {
		want[strings.TrimSpace(name)] = true
	}
	var out []*system
	for _, s := range systems {
		if s != nil && (only == "" || want[s.name]) {
			out = append(out, s)
		}
	}
	return out
}

// config is what every child is given.
type config struct {
	spread  time.Duration // how long the spread send runs, and the spread receive
	timeout time.Duration // longest a child may run
	budget  time.Duration // longest the making of the queues may take; 0: no limit
	nofile  uint64        // cap on the descriptor limit; 0: the hard limit
}

func runAsChild(name, phase string, n int, dir string, cfg config) int {
	s := selectSystems(name)
	if len(s) != 1 {
		fmt.Fprintf(os.Stderr, "manyqueues: no system %q in this build\n", name)
		return 2
	}
	r := runChild(s[0], phase, n, dir, cfg)
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "manyqueues:", err)
		return 1
	}
	return 0
}

// childEnv is set in a child's environment: a test binary that finds it
// runs as the child (see TestMain).
const childEnv = "MANYQUEUES_CHILD"

// row is one system at one number of queues: its two children's results.
type row struct {
	System string  `json:"system"`
	Queues int     `json:"queues"`
	Create *result `json:"create,omitempty"`
	Reopen *result `json:"reopen,omitempty"`
	Err    string  `json:"error,omitempty"` // where and why it stopped
}

// measure runs the create child, then, if every queue was made, the reopen
// child, on a fresh data directory that it removes after.
func measure(s *system, n int, scratch string, cfg config) row {
	rw := row{System: s.name, Queues: n}
	dir := filepath.Join(scratch, fmt.Sprintf("%s-%d", strings.ReplaceAll(s.name, " ", "-"), n))
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		rw.Err = err.Error()
		return rw
	}
	c, err := spawn(s.name, phaseCreate, n, dir, cfg)
	rw.Create = c
	if err != nil {
		rw.Err = "create: " + err.Error()
		return rw
	}
	if c.Err != "" {
		rw.Err = "create: " + c.Err
		return rw
	}
	o, err := spawn(s.name, phaseReopen, n, dir, cfg)
	rw.Reopen = o
	switch {
	case err != nil:
		rw.Err = "reopen: " + err.Error()
	case o.Err != "":
		rw.Err = "reopen: " + o.Err
	case o.Counted != c.Messages:
		rw.Err = fmt.Sprintf("reopen: the queues hold %d messages, %d were left", o.Counted, c.Messages)
	}
	return rw
}

// spawn runs this program as a child for one phase and decodes its result.
// A child that dies (a crash, the timeout, the memory killer) is an error
// that carries the end of its standard error.
func spawn(name, phase string, n int, dir string, cfg config) (*result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-child", name, "-phase", phase,
		"-queues", strconv.Itoa(n), "-dir", dir, "-spread", cfg.spread.String(),
		"-nofile", strconv.FormatUint(cfg.nofile, 10), "-budget", cfg.budget.String())
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("killed after %v", cfg.timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("child %v: %s", err, tail(stderr.String()))
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("child output: %w: %s", err, tail(stderr.String()))
	}
	return &r, nil
}

// tail is the line of s that says why a child died: its panic or fatal
// error line, or else its last line; at most 300 bytes.
func tail(s string) string {
	s = strings.TrimSpace(s)
	lines := strings.Split(s, "\n")
	s = lines[len(lines)-1]
	for _, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			s = l
			break
		}
	}
	if len(s) > 300 {
		s = "..." + s[len(s)-300:]
	}
	return s
}
