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
	"github.com/pagelog/pagelog/internal/httpserve"
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
	fs := newFlags("serve", "--dir D [--listen ADDR] [--name N] [--tls-cert F --tls-key F] [--token-file F]",
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
			"It listens on 127.0.0.1 unless --listen names another address, and\n"+
			"authenticates no one unless told to: --tls-cert and --tls-key serve\n"+
			"HTTPS, --client-ca asks clients for a certificate signed by that CA, and\n"+
			"--token-file makes scrapes carry Authorization: Bearer TOKEN (401 without).\n"+
			"With --raft it runs one node of a replicated queue instead: the command\n"+
			raftNodeCommand+" with the other flags (`pagelog serve --raft --help`).", stderr)
	dir := fs.String("dir", "", "log or queue `directory`")
	listen := fs.String("listen", "127.0.0.1:8080", "`address` to listen on (host:port; \":8080\" for every interface)")
	name := fs.String("name", "", "value of the log and queue labels (default: D's base name)")
	fs.Bool("raft", false, "run one node of a replicated queue ("+raftNodeCommand+"), passing it the other flags")
	var web httpserve.Options
	web.AddFlags(fs)
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	setup, err := httpserve.Load(web)
	if err != nil {
		return usageError(fs, "%v", err)
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
	fmt.Fprintf(stdout, "serving %s://%s/metrics for %s\n", setup.Scheme(), ln.Addr(), *dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serveMetrics(ctx, setup, ln, *dir, *name, stderr); err != nil {
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

// serveMetrics serves /metrics on ln as setup says (timeouts, connection
// bound, TLS, token) until ctx is done, then waits for the scrapes under
// way as setup.Shutdown does (5 s, then their connections close). Scrapes
// run one at a time.
func serveMetrics(ctx context.Context, setup *httpserve.Setup, ln net.Listener, dir, name string, errLog io.Writer) error {
	var mu sync.Mutex
	sc := &scraper{dir: dir}
	defer func() {
		mu.Lock()
		sc.close()
		mu.Unlock()
	}()
	go sc.refreshLoop(ctx, &mu)
	// The first open before the first scrape (a failure is the first
	// scrape's to report).
	mu.Lock()
	_, _ = sc.stats()
	mu.Unlock()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		mu.Lock()
		st, err := sc.stats()
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
	srv := setup.Server(mux)
	done := make(chan error, 1)
	go func() {
		<-ctx.Done()
		done <- setup.Shutdown(srv)
	}()
	if err := srv.Serve(setup.Listener(ln)); !errors.Is(err, http.ErrServerClosed) {
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

// A scrape must stay cheap on a log of many segments: reading the
// directory afresh at every scrape (a read-only open, the blocks of every
// file) took about 0.3 s at 10,000 segments. So for a plain log, serve
// keeps a read-only Log open between scrapes, which follows the writer
// (offsets, new segments), and the directory's blocks, and opens and
// counts them again in the background every scrapeRefresh (a dropped
// segment, a replaced directory). A scrape checks that the directory is
// still the one it opened (a missing one is an error at once, a replaced
// one is opened again). A queue's figures come from its files at every
// scrape (queue.Stat), as before.
const scrapeRefresh = 10 * time.Second

type scraper struct {
	dir string

	// under serveMetrics' mutex
	l      *engine.Log
	id     [2]uint64 // the directory's identity when l was opened
	disk   int64
	opened time.Time
}

// stats returns the figures of a scrape.
func (s *scraper) stats() (dirStats, error) {
	fi, err := os.Stat(s.dir)
	if err != nil {
		return dirStats{}, err
	}
	if isQueueDir(s.dir) {
		s.close()
		return readDirStats(s.dir)
	}
	id := dirID(fi)
	if s.l == nil || s.id != id {
		if err := s.reopen(id); err != nil {
			return dirStats{}, err
		}
	}
	st := dirStats{At: time.Now(), Dir: s.dir, DiskBytes: s.disk}
	_ = s.l.Next() // follow the writer
	st.Log = s.l.Stats()
	if st.Log.Segments > 1 && !exists(filepath.Join(s.dir, fmt.Sprintf("%020d.log", st.Log.First))) {
		// The writer dropped segments from the front (DropBefore,
		// retention), which a read-only log that only reads keeps: the
		// figures come from an open of what is there now.
		if err := s.reopen(id); err != nil {
			return dirStats{}, err
		}
		st.DiskBytes = s.disk
		_ = s.l.Next()
		st.Log = s.l.Stats()
	}
	return st, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// reopen opens the log again and counts the directory's blocks.
func (s *scraper) reopen(id [2]uint64) error {
	l, err := engine.OpenReadOnly(s.dir, engine.Options{})
	if err != nil {
		return err
	}
	disk, err := diskBytes(s.dir)
	if err != nil {
		_ = l.Close()
		return err
	}
	s.close()
	s.l, s.id, s.disk, s.opened = l, id, disk, time.Now()
	return nil
}

// refreshLoop opens the log again every scrapeRefresh, outside the
// scrapes' lock, and swaps it in.
func (s *scraper) refreshLoop(ctx context.Context, mu *sync.Mutex) {
	t := time.NewTicker(scrapeRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fi, err := os.Stat(s.dir)
		if err != nil || isQueueDir(s.dir) {
			continue
		}
		l, err := engine.OpenReadOnly(s.dir, engine.Options{})
		if err != nil {
			continue
		}
		disk, err := diskBytes(s.dir)
		mu.Lock()
		if err != nil || ctx.Err() != nil {
			mu.Unlock()
			_ = l.Close()
			continue
		}
		s.close()
		s.l, s.id, s.disk, s.opened = l, dirID(fi), disk, time.Now()
		mu.Unlock()
	}
}

func (s *scraper) close() {
	if s.l != nil {
		_ = s.l.Close()
		s.l = nil
	}
}

// isQueueDir tells a queue's directory by its own files, without listing
// the directory (queue.IsQueue lists it).
func isQueueDir(dir string) bool {
	for _, name := range []string{"queue.head", "deletes"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

func dirID(fi os.FileInfo) [2]uint64 {
	return fileID(fi)
}
