package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// queueCommands are the subcommands of `pagelog queue`.
var queueCommands = []command{
	{"send", "send stdin lines as messages and print their offsets", runQueueSend},
	{"receive", "hand out ready messages and print offset<TAB>body", runQueueReceive},
	{"delete", "delete a message by offset", runQueueDelete},
	{"stats", "print the queue's positions and counts, one per line", runQueueStats},
}

// queueAbout is said once in the usage of every queue subcommand: the
// in-flight table and its deadlines live in the process that received.
const queueAbout = "A queue is a directory: its messages are a log (so `pagelog read` works on\n" +
	"it), beside them queue.head and deletes/. One process at a time may have it\n" +
	"open. Deadlines live in the receiving process only: when a command exits, what\n" +
	"it received and did not delete is ready again for the next one."

func runQueue(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "help" {
		queueUsage(stdout)
		return 0
	}
	return dispatch("pagelog queue", queueCommands, queueUsage, args, stdin, stdout, stderr)
}

func queueUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: pagelog queue <command> --dir D [flags]\n\nCommands:\n")
	for _, c := range queueCommands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n%s\n\nRun 'pagelog queue <command> --help' for a command's flags.\n", queueAbout)
}

// openQueue opens the queue in dir; unless create, the directory must exist.
func openQueue(dir string, create bool, opts queue.Options) (*queue.Queue, error) {
	if !create {
		if st, err := os.Stat(dir); err != nil {
			return nil, err
		} else if !st.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", dir)
		}
	}
	return queue.Open(dir, opts)
}

// closeQueue closes q, keeping the first error.
func closeQueue(q *queue.Queue, err error) error {
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	return err
}

func runQueueSend(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue send", "--dir D [--sync none|always|interval]",
		"Opens the queue in D (creating it if needed) and sends each line of standard\n"+
			"input as one message (the newline removed). Prints each message's offset\n"+
			"as soon as the send is acknowledged.\n\n"+queueAbout, stderr)
	dir := fs.String("dir", "", "queue `directory`")
	syncName := fs.String("sync", engine.SyncNone.String(), "when a send is acknowledged: none, always or interval")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}
	q, err := openQueue(*dir, true, queue.Options{Log: engine.Options{Sync: policy}})
	if err != nil {
		return fail(stderr, "queue send", err)
	}
	if err := closeQueue(q, sendLines(q, stdin, stdout)); err != nil {
		return fail(stderr, "queue send", err)
	}
	return 0
}

// sendLines sends every line of in and writes each offset to out, flushed
// at once so that a reader of a pipe sees it.
func sendLines(q *queue.Queue, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	var long []byte
	for {
		line, err := readLine(r, &long)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read stdin: %w", err)
		}
		if line == nil {
			return nil
		}
		off, serr := q.Send(line)
		if serr != nil {
			return serr
		}
		if _, werr := fmt.Fprintf(out, "%d\n", off); werr != nil {
			return fmt.Errorf("write stdout: %w", werr)
		}
		if err != nil { // the last line, without a newline
			return nil
		}
	}
}

func runQueueReceive(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue receive", "--dir D [--count N] [--wait D] [--visibility D]",
		"Hands out up to N messages, ready-again ones first, lowest offset first, and\n"+
			"prints each as its offset, a tab and its body, then a newline. Waits up to\n"+
			"--wait in all for messages to become ready (0: takes only what is ready\n"+
			"now). Exits 1 when no message was ready.\n\n"+queueAbout, stderr)
	dir := fs.String("dir", "", "queue `directory`")
	count := fs.Int("count", 1, "most messages to hand out")
	wait := fs.Duration("wait", 0, "how long to wait in all for ready messages")
	vis := fs.Duration("visibility", queue.DefaultVisibility, "how long a message stays hidden (in this process)")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if *count < 1 || *wait < 0 || *vis <= 0 {
		return usageError(fs, "want --count >= 1, --wait >= 0 and --visibility > 0")
	}
	q, err := openQueue(*dir, false, queue.Options{Visibility: *vis})
	if err != nil {
		return fail(stderr, "queue receive", err)
	}
	n, err := receiveMessages(q, *count, *wait, stdout)
	if err = closeQueue(q, err); err != nil {
		return fail(stderr, "queue receive", err)
	}
	if n == 0 {
		return fail(stderr, "queue receive", errors.New("no message ready"))
	}
	return 0
}

// receiveMessages prints up to count messages, waiting up to wait in all.
func receiveMessages(q *queue.Queue, count int, wait time.Duration, out io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	w := bufio.NewWriter(out)
	n := 0
	for ; n < count; n++ {
		m, err := q.Receive(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			return n, errors.Join(err, w.Flush())
		}
		w.WriteString(strconv.FormatUint(m.Offset, 10))
		w.WriteByte('\t')
		w.Write(m.Body) // valid: the message is neither deleted nor expired yet
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return n, fmt.Errorf("write stdout: %w", err)
	}
	return n, nil
}

func runQueueDelete(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue delete", "--dir D --offset N [--sync none|always|interval]",
		"Deletes the message at offset N: it is never handed out again. The command\n"+
			"runs in a process that did not receive the message, and deadlines live in\n"+
			"the receiving process only, so it cannot check that a receive happened: it\n"+
			"deletes any message of the queue, received or not (Queue.Discard). Deleting\n"+
			"a message already deleted succeeds; an offset beyond the end fails.\n\n"+queueAbout, stderr)
	dir := fs.String("dir", "", "queue `directory`")
	offset := fs.Uint64("offset", 0, "`offset` of the message to delete (required)")
	syncName := fs.String("sync", engine.SyncNone.String(), "when the delete is acknowledged: none, always or interval")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	if !isSet(fs, "offset") {
		return usageError(fs, "missing --offset")
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}
	q, err := openQueue(*dir, false, queue.Options{Log: engine.Options{Sync: policy}})
	if err != nil {
		return fail(stderr, "queue delete", err)
	}
	if err := closeQueue(q, q.Discard(*offset)); err != nil {
		return fail(stderr, "queue delete", err)
	}
	fmt.Fprintf(stdout, "deleted %d\n", *offset)
	return 0
}

func runQueueStats(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue stats", "--dir D",
		"Opens the queue in D and prints its positions and counts, one per line as\n"+
			"key and value: end (next offset), head (oldest message not deleted),\n"+
			"messages (not deleted), and what opening the queue found.\n\n"+queueAbout, stderr)
	dir := fs.String("dir", "", "queue `directory`")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := requireDir(fs, *dir); st >= 0 {
		return st
	}
	q, err := openQueue(*dir, false, queue.Options{})
	if err != nil {
		return fail(stderr, "queue stats", err)
	}
	st, rec := q.Stats(), q.Recovery()
	undeleted := countUndeleted(q)
	if err := q.Close(); err != nil {
		return fail(stderr, "queue stats", err)
	}
	w := bufio.NewWriter(stdout)
	for _, kv := range [][2]any{
		{"end", st.End}, {"head", st.Head}, {"messages", undeleted},
		{"cursor", st.Cursor}, {"in_flight", st.InFlight}, {"ready_again", st.ReadyAgain},
		{"head_from", strconv.Quote(rec.HeadFrom)}, {"checkpoint_error", errString(rec.CheckpointError)},
		{"delete_records", rec.DeleteRecords}, {"delete_records_above_head", rec.DeletesApplied},
		{"damaged_delete_records", len(rec.DeleteDamage)}, {"lost_offsets", rec.Lost},
	} {
		fmt.Fprintf(w, "%s %v\n", kv[0], kv[1])
	}
	if err := w.Flush(); err != nil {
		return fail(stderr, "queue stats", err)
	}
	return 0
}

// countUndeleted counts the messages not deleted by handing them all out
// (this process's hand-outs are forgotten when it exits).
func countUndeleted(q *queue.Queue) int {
	n := 0
	for {
		_, ok, _ := q.TryReceive()
		if !ok {
			return n
		}
		n++ // a damaged record is a message too
	}
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return strconv.Quote(err.Error())
}

// The queue phase of `pagelog demo` runs its first half in a child process
// that the demo kills with SIGKILL: a real crash. The child is this same
// executable, recognized by an environment variable in init (so that it
// also works from the test binary, whose main never runs).
const demoChildEnv = "PAGELOG_DEMO_QUEUE_CHILD"

func init() {
	if os.Getenv(demoChildEnv) == "1" && len(os.Args) == 5 {
		os.Exit(queueDemoChild(os.Args[1], os.Args[2], os.Args[3], os.Args[4]))
	}
}

// Marks the child keeps per message in a shared file (one byte each), read
// by the parent after the kill.
const (
	markReceived  = 1 << 0 // handed out in the child
	markDeleting  = 1 << 1 // the child called Delete (set before the call)
	markReceived2 = 1 << 2 // handed out in the parent
	markDeleting2 = 1 << 3 // the parent called Delete
)

// queueDemoChild sends, receives and deletes with 4 workers until it is
// killed, reporting "progress <cycles> <elapsed ns>" lines on stdout.
func queueDemoChild(dir, marksPath, nArg, sizeArg string) int {
	n, err1 := strconv.Atoi(nArg)
	size, err2 := strconv.Atoi(sizeArg)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 2
	}
	marks, err := mapMarks(marksPath, n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	q, err := queue.Open(dir, queue.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	d := &demo{ctx: context.Background(), messages: n, size: size, template: makeTemplate(size)}
	w := &queueWorkers{d: d, q: q, marks: marks, recv: markReceived, del: markDeleting}
	w.progress = progressPrinter(int64(max(1, min(4096, n/20))))
	if err := w.run(context.Background(), 0, false); err != nil {
		fmt.Fprintln(os.Stderr, "queue demo child:", err)
		return 1
	}
	select {} // everything done before the kill came: wait for it
}

// progressPrinter returns a function that prints a progress line every
// step cycles.
func progressPrinter(step int64) func(cycles int64, elapsed time.Duration) {
	return func(cycles int64, elapsed time.Duration) {
		if cycles%step == 0 {
			fmt.Fprintf(os.Stdout, "progress %d %d\n", cycles, elapsed.Nanoseconds())
		}
	}
}

// mapMarks maps the marks file at path (created or cleared) shared and
// writable: one uint32 per message, updated with atomic ORs.
func mapMarks(path string, n int) ([]uint32, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != int64(4*n) {
		if err := f.Truncate(int64(4 * n)); err != nil {
			return nil, err
		}
	}
	b, err := unix.Mmap(int(f.Fd()), 0, 4*n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n), nil
}

func unmapMarks(marks []uint32) error {
	return unix.Munmap(unsafe.Slice((*byte)(unsafe.Pointer(&marks[0])), 4*len(marks)))
}

// queueWorkers are the 4 goroutines of the demo's queue phase: each sends
// the next message while any is left, receives one, checks it, marks it
// and deletes it.
type queueWorkers struct {
	d         *demo
	q         *queue.Queue
	marks     []uint32
	recv, del uint32 // the marks this process sets

	next        atomic.Int64 // index of the next message to send
	cycles      atomic.Int64
	redelivered atomic.Int64
	progress    func(cycles int64, elapsed time.Duration)
	lat         [][]time.Duration // per worker; nil: not measured
}

const queueDemoWorkers = 4

// run runs the workers, sending from message sent on. With drain they stop
// once every message was sent and the queue is empty; without, once every
// message was sent and as many received.
func (w *queueWorkers) run(ctx context.Context, sent int64, drain bool) error {
	w.next.Store(sent)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	errc := make(chan error, queueDemoWorkers)
	for k := range queueDemoWorkers {
		go func() { errc <- w.work(ctx, cancel, k, start, drain) }()
	}
	var err error
	for range queueDemoWorkers {
		err = errors.Join(err, <-errc)
	}
	if err == nil {
		err = w.d.interrupted()
	}
	return err
}

func (w *queueWorkers) work(ctx context.Context, cancel func(), k int, start time.Time, drain bool) error {
	n := int64(w.d.messages)
	body := slices.Clone(w.d.template)
	for {
		if drain && w.next.Load() >= n && w.empty() {
			cancel()
			return nil
		}
		t0 := time.Now()
		if i := w.next.Add(1) - 1; i < n {
			stamp(body, uint64(i))
			if _, err := w.q.Send(body); err != nil {
				return err
			}
		} else if !drain {
			return nil
		}
		m, err := w.q.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := w.handle(m); err != nil {
			return err
		}
		c := w.cycles.Add(1)
		if w.lat != nil {
			w.lat[k] = append(w.lat[k], time.Since(t0))
		}
		if w.progress != nil {
			w.progress(c, time.Since(start))
		}
	}
}

// handle checks and deletes one message, counting it as redelivered when
// it was handed out before (in either process, or after a deadline).
func (w *queueWorkers) handle(m queue.Message) error {
	if m.Offset >= uint64(len(w.marks)) || !w.sentByDemo(m.Body) {
		return fmt.Errorf("offset %d: not a message this demo sent", m.Offset)
	}
	old := atomic.OrUint32(&w.marks[m.Offset], w.recv)
	if m.Receives > 1 || old&(markReceived|markReceived2) != 0 {
		w.redelivered.Add(1)
	}
	atomic.OrUint32(&w.marks[m.Offset], w.del)
	return w.q.Delete(m.Offset)
}

// sentByDemo reports whether body is one of the demo's messages. Workers
// send concurrently, so a message's index (its stamp) and its offset may
// differ: the stamp is read from the body.
func (w *queueWorkers) sentByDemo(body []byte) bool {
	if w.d.size < 8 {
		return len(body) == w.d.size
	}
	i := binary.BigEndian.Uint64(body)
	return i < uint64(w.d.messages) && w.d.check(body, i)
}

func (w *queueWorkers) empty() bool {
	st := w.q.Stats()
	return st.Head == st.End
}
