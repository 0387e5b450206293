package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/pagelog/pagelog/engine"
)

// `pagelog serve` writes the Prometheus text format itself: the library's
// go.mod stays free of client_golang (only the metrics module has it). Its
// names, help texts and types are those of the metrics module's collectors
// (a test there parses this output and compares), plus the figures only the
// files give: disk bytes and lost messages.

func runServe(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if rest, ok := raftArgs(args); ok {
		return serveRaft(rest, stdin, stdout, stderr)
	}
	fs := newFlags("serve", "--dir D [--listen ADDR] [--name N]",
		"Serves the figures of the log or queue in D as Prometheus metrics on\n"+
			"http://ADDR/metrics, read from D's files at each scrape beside the process\n"+
			"that has it open (no lock is taken, nothing is written), until interrupted.\n"+
			"Metrics: pagelog_first_offset, pagelog_next_offset, pagelog_segments,\n"+
			"pagelog_log_bytes and pagelog_disk_bytes (label log=N); for a queue also\n"+
			"pagelog_queue_depth, pagelog_queue_head_offset, pagelog_queue_end_offset,\n"+
			"pagelog_queue_checkpointed_offset, pagelog_queue_oldest_message_age_seconds,\n"+
			"pagelog_queue_dead_letters and pagelog_queue_lost_messages (label queue=N).\n"+
			"The counters that only the owning process knows (appends, reads, syncs,\n"+
			"receives, redeliveries) and the in-flight split of the depth are exported\n"+
			"by the metrics module's collectors registered in that process.\n"+
			"With --raft it runs one node of a replicated queue instead: the command\n"+
			raftNodeCommand+" with the other flags (`pagelog serve --raft --help`).", stderr)
	dir := fs.String("dir", "", "log or queue `directory`")
	listen := fs.String("listen", ":8080", "`address` to listen on (host:port)")
	name := fs.String("name", "", "value of the log and queue labels (default: D's base name)")
	fs.Bool("raft", false, "run one node of a replicated queue ("+raftNodeCommand+"), passing it the other flags")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if *name == "" {
		abs, err := filepath.Abs(*dir)
		if err != nil {
			return fail(stderr, "serve", err)
		}
		*name = filepath.Base(abs)
	}
	if !utf8.ValidString(*name) {
		return usageError(fs, "--name %q: not UTF-8", *name)
	}
	if ok, err := engine.IsLog(*dir); err != nil {
		return fail(stderr, "serve", err)
	} else if !ok {
		return fail(stderr, "serve", fmt.Errorf("%w: %s", engine.ErrNoLog, *dir))
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(stderr, "serve", err)
	}
	fmt.Fprintf(stdout, "serving http://%s/metrics for %s\n", ln.Addr(), *dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveMetrics(ctx, ln, *dir, *name, stderr); err != nil {
		return fail(stderr, "serve", err)
	}
	return 0
}

// raftNodeCommand is the command `pagelog serve --raft` runs: one node of
// a replicated queue. It is built from the raftstore module
// (raftstore/cmd/pagelog-raft), which has a go.mod of its own so that the
// library never depends on hashicorp/raft.
const raftNodeCommand = "pagelog-raft"

// raftArgs reports whether args ask for --raft (before a "--"), and
// returns them without it.
func raftArgs(args []string) ([]string, bool) {
	for i, a := range args {
		switch a {
		case "--":
			return nil, false
		case "--raft", "-raft", "--raft=true", "-raft=true":
			return append(args[:i:i], args[i+1:]...), true
		}
	}
	return nil, false
}

// findRaftNode returns the path of pagelog-raft: beside this executable,
// else on PATH.
func findRaftNode() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), raftNodeCommand)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(raftNodeCommand)
}

// serveRaft runs pagelog-raft with args. From the command line (the
// process's own stdin, stdout and stderr) it replaces this process with
// it, so that signals and the exit status are the node's own; otherwise it
// runs it as a child on the given streams, forwards SIGINT and SIGTERM to
// it, and returns its exit status.
func serveRaft(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	path, err := findRaftNode()
	if err != nil {
		fmt.Fprintf(stderr, "pagelog serve --raft: %s is neither beside this pagelog nor on PATH: build it in the source tree with "+
			"`make raft` (bin/%s, beside bin/pagelog) or `go build -C raftstore -o DIR/%s ./cmd/%s`\n",
			raftNodeCommand, raftNodeCommand, raftNodeCommand, raftNodeCommand)
		return 1
	}
	if stdin == io.Reader(os.Stdin) && stdout == io.Writer(os.Stdout) && stderr == io.Writer(os.Stderr) {
		err := syscall.Exec(path, append([]string{path}, args...), os.Environ())
		return fail(stderr, "serve --raft", fmt.Errorf("exec %s: %w", path, err))
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return fail(stderr, "serve --raft", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &ee) && ee.ExitCode() >= 0:
				return ee.ExitCode()
			}
			return fail(stderr, "serve --raft", fmt.Errorf("%s: %w", path, err))
		}
	}
}

// serveMetrics serves /metrics on ln until ctx is done, then waits up to
// 5 s for the scrapes under way. Scrapes run one at a time.
func serveMetrics(ctx context.Context, ln net.Listener, dir, name string, errLog io.Writer) error {
	var mu sync.Mutex
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		mu.Lock()
		st, err := readDirStats(dir)
		mu.Unlock()
		if err != nil {
			fmt.Fprintf(errLog, "pagelog serve: %s: %v\n", time.Now().Format(time.TimeOnly), err)
			http.Error(w, "pagelog serve: "+err.Error(), http.StatusInternalServerError)
			return
		}
		var b bytes.Buffer
		writeExposition(&b, &st, name)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		if r.Method == http.MethodGet {
			w.Write(b.Bytes())
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-done
}

// writeExposition writes st in the Prometheus text format, version 0.0.4.
func writeExposition(b *bytes.Buffer, st *dirStats, name string) {
	gauge := func(metric, help, label string, v string) {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s=\"%s\"} %s\n",
			metric, escapeHelp(help), metric, metric, label, escapeLabel(name), v)
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	gauge("pagelog_first_offset", "Oldest offset the log holds.", "log", u(st.Log.First))
	gauge("pagelog_next_offset", "Offset the next append gets.", "log", u(st.Log.Next))
	gauge("pagelog_segments", "Segment files in the log.", "log", i(int64(st.Log.Segments)))
	gauge("pagelog_log_bytes", "Bytes of records in the log's segments.", "log", i(st.Log.Bytes))
	gauge("pagelog_disk_bytes", "Bytes the files of the log's directory take on disk (a queue's delete and receive-count logs included).", "log", i(st.DiskBytes))
	q := st.Queue
	if q == nil {
		return
	}
	gauge("pagelog_queue_depth", "Messages not deleted, in every state.", "queue", u(q.Messages))
	gauge("pagelog_queue_end_offset", "Offset of the next send.", "queue", u(q.End))
	gauge("pagelog_queue_head_offset", "Oldest message not deleted.", "queue", u(q.Head))
	gauge("pagelog_queue_checkpointed_offset", "Head written in queue.head.", "queue", u(q.Checkpointed))
	if q.AgeKnown { // absent when the time index cannot tell
		gauge("pagelog_queue_oldest_message_age_seconds", "Age of the oldest message not deleted (0 when there is none).", "queue",
			strconv.FormatFloat(q.OldestAge.Seconds(), 'g', -1, 64))
	}
	gauge("pagelog_queue_dead_letters", "Messages in the dead-letter queue not deleted.", "queue", u(q.DeadLetters))
	gauge("pagelog_queue_lost_messages", "Messages not deleted whose records the log no longer holds (the next open deletes them).", "queue", u(q.Lost))
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }
