package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/queue"
)

// queueCommands are the subcommands of `pagelog queue`.
var queueCommands = []command{
	{"send", "send stdin lines as messages (delayed, grouped, deduplicated) and print their offsets", runQueueSend},
	{"receive", "hand out ready messages and print offset<TAB>body", runQueueReceive},
	{"delete", "delete a message by offset", runQueueDelete},
	{"stats", "print the queue's positions and counts, one per line", runQueueStats},
	{"dead", "list the dead letters (in <dir>.dead) as offset<TAB>body", runQueueDead},
	{"redrive", "move dead letters back into the queue as new messages", runQueueRedrive},
}

// queueAbout is said once in the usage of every queue subcommand.
const queueAbout = "A queue is a directory: its messages are a log (so `pagelog read` works on\n" +
	"it), beside them queue.head, deletes/ and (with --max-receives) receives/;\n" +
	"its dead letters are a queue of their own in <dir>.dead. It is owned by one\n" +
	"process at a time: send, receive, delete and redrive open it for writing and\n" +
	"fail while another process has it open; stats and dead (like read, dump and\n" +
	"verify) only read and work beside it. Deadlines live in the receiving process\n" +
	"only: when a command exits, what it received and did not delete is ready\n" +
	"again for the next one. Only send creates a queue.\n\n" + storeAbout

func runQueue(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "help" {
		queueUsage(stdout)
		return 0
	}
	return dispatch("pagelog queue", queueCommands, queueUsage, args, stdin, stdout, stderr)
}

func queueUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: pagelog queue <command> (--dir D | --store D --queue NAME) [flags]\n\nCommands:\n")
	for _, c := range queueCommands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n%s\n\nRun 'pagelog queue <command> --help' for a command's flags.\n", queueAbout)
}

// openQueue opens the queue in dir for one of the commands that write.
// Unless create, the directory must hold a queue already; with create, its
// parent must exist (a mistyped path is not made into a tree of
// directories). A queue another process has open is named as such.
func openQueue(dir string, create bool, opts queue.Options) (*queue.Queue, error) {
	if create {
		if st, err := os.Stat(filepath.Dir(filepath.Clean(dir))); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s: the parent directory does not exist (send creates the queue's own directory only)", dir)
		}
		if ok, _ := queue.IsQueue(dir); !ok {
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				return nil, fmt.Errorf("%s holds files but no queue: send creates a queue only in an empty or new directory", dir)
			}
		}
	} else if ok, err := queue.IsQueue(dir); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: %s (only `pagelog queue send` creates one)", queue.ErrNotQueue, dir)
	}
	q, err := queue.Open(dir, opts)
	if errors.Is(err, engine.ErrLocked) {
		return nil, fmt.Errorf("the queue in %s (or its dead-letter queue) is open in another process (a sender, receiver or deleter): one process at a time may have it open for writing", dir)
	}
	return q, err
}

// closeQueue closes q, keeping the first error.
func closeQueue(q *queue.Queue, err error) error {
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	return err
}

func runQueueSend(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue send", "(--dir D | --store D --queue NAME) [--sync none|always|interval] [--delay D] [--group G] [--dedup-id X]",
		"Opens the queue in D (creating it if needed: D's parent must exist) and\n"+
			"sends each line of standard input as one message (the newline removed,\n"+
			"and a carriage return before it: CRLF input sends the same messages as LF\n"+
			"input; `pagelog append` keeps every byte).\n"+
			"Prints each message's offset as soon as the send is acknowledged. A line\n"+
			"over the size limit stops it: the error names the line, and no later line\n"+
			"is sent. --delay hides each message until that long after its send (whole\n"+
			"milliseconds, rounded up); --group puts each in that ordering group (handed\n"+
			"out one at a time, in send order); --dedup-id gives each that deduplication\n"+
			"id: within the queue's dedup window (5 minutes) only the first send with it\n"+
			"appends a message, and every later one prints the first one's offset.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	syncName := fs.String("sync", engine.SyncNone.String(), "when a send is acknowledged: none, always or interval")
	var o queue.SendOptions
	fs.Var(durationFlag{&o.Delay}, "delay", "hide each message this long after its send, with its unit (5s)")
	fs.StringVar(&o.Group, "group", "", "ordering `group` of the messages (1-128 bytes)")
	fs.StringVar(&o.DedupID, "dedup-id", "", "deduplication `id` of the messages (1-128 bytes)")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}
	switch {
	case o.Delay < 0 || o.Delay > queue.MaxDelay:
		return usageError(fs, "--delay %v: want a duration in [0, %v]", o.Delay, queue.MaxDelay)
	case len(o.Group) > queue.MaxIDBytes || isSet(fs, "group") && o.Group == "":
		return usageError(fs, "--group: want 1-%d bytes", queue.MaxIDBytes)
	case len(o.DedupID) > queue.MaxIDBytes || isSet(fs, "dedup-id") && o.DedupID == "":
		return usageError(fs, "--dedup-id: want 1-%d bytes", queue.MaxIDBytes)
	}
	q, done, err := t.open(true, queue.Options{Log: engine.Options{Sync: policy}})
	if err != nil {
		return fail(stderr, "queue send", err)
	}
	if err := done(sendLines(q, o, stdin, stdout)); err != nil {
		return fail(stderr, "queue send", err)
	}
	return 0
}

// sendLines sends every line of in with options o and writes each offset
// to out, flushed at once so that a reader of a pipe sees it. A line's
// carriage return at its end is removed, as bufio.ScanLines does: text
// from Windows tools sends what the same text with LF endings sends.
func sendLines(q *queue.Queue, o queue.SendOptions, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	var long []byte
	for n := 1; ; n++ {
		line, err := readLine(r, &long)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read stdin: %w", err)
		}
		if line == nil {
			return nil
		}
		off, serr := q.SendWith(bytes.TrimSuffix(line, []byte("\r")), o)
		if errors.Is(serr, engine.ErrTooLarge) {
			return fmt.Errorf("line %d (%d bytes) was not sent, nor any line after it (%d sent): %w", n, len(line), n-1, serr)
		}
		if serr != nil {
			return fmt.Errorf("line %d was not sent, nor any line after it (%d sent): %w", n, n-1, serr)
		}
		if _, werr := fmt.Fprintf(out, "%d\n", off); werr != nil {
			return fmt.Errorf("write stdout: %w", werr)
		}
		if err != nil { // the last line, without a newline
			return nil
		}
	}
}

// durationFlag is a flag.Value for a duration that says what it wants when
// given a bare number.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration with its unit, such as 5s, 500ms or 2m")
	}
	*f.d = d
	return nil
}

func runQueueReceive(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue receive", "(--dir D | --store D --queue NAME) [--count N] [--wait D] [--visibility D] [--max-receives N] [--json]",
		"Hands out up to N messages, ready-again ones first, lowest offset first, and\n"+
			"prints each as soon as it is received: its offset, a tab and its body, then\n"+
			"a newline, with the body escaped so that one message is one line (\\n, \\t,\n"+
			"\\r, \\\\ and \\xNN for other control bytes and bytes that are not UTF-8). With\n"+
			"--json, one object per line: offset, receives, deadline (RFC 3339) and body\n"+
			"(a JSON string), or body_base64 when the body is not UTF-8. Waits up to --wait\n"+
			"in all for messages to become ready (0: takes only what is ready now).\n"+
			"Exits 1 when no message was ready. Delayed messages are not ready before\n"+
			"their due time, and of an ordering group only the oldest not deleted is.\n"+
			"With --max-receives N, each hand-out's receive count is kept (in\n"+
			"receives/, across processes), and a message received N times without a\n"+
			"delete moves to the dead letters (<dir>.dead) instead of being handed out\n"+
			"again.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	count := fs.Int("count", 1, "most messages to hand out")
	var wait time.Duration
	fs.Var(durationFlag{&wait}, "wait", "how long to wait in all for ready messages, with its unit (5s)")
	vis := queue.DefaultVisibility
	fs.Var(durationFlag{&vis}, "visibility", "how long a message stays hidden (in this process), with its unit")
	maxRecv := fs.Int("max-receives", 0, "move a message received this many times to the dead letters (0: never)")
	asJSON := fs.Bool("json", false, "print JSON lines")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	if *count < 1 || wait < 0 || vis <= 0 || vis > queue.MaxVisibility || *maxRecv < 0 {
		return usageError(fs, "want --count >= 1, --wait >= 0, --max-receives >= 0 and --visibility in (0, %v]", queue.MaxVisibility)
	}
	q, done, err := t.open(false, queue.Options{Visibility: vis, MaxReceives: *maxRecv})
	if err != nil {
		return fail(stderr, "queue receive", err)
	}
	n, err := receiveMessages(q, *count, wait, *asJSON, stdout, stderr)
	if err = done(err); errors.Is(err, errDamaged) {
		return 1 // each damaged message was named on standard error
	} else if err != nil {
		return fail(stderr, "queue receive", err)
	}
	if n == 0 {
		return fail(stderr, "queue receive", errors.New("no message ready"))
	}
	return 0
}

// receiveMessages prints up to count messages, each as it comes, waiting
// up to wait in all.
func receiveMessages(q *queue.Queue, count int, wait time.Duration, asJSON bool, out, errOut io.Writer) (n int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	w := bufio.NewWriter(out)
	damaged := 0
	defer func() {
		if damaged > 0 && err == nil {
			err = errDamaged
		}
	}()
	for ; n < count; n++ {
		var m queue.Message
		if wait == 0 {
			var ok bool
			if m, ok, err = q.TryReceive(); !ok && err == nil {
				break
			}
		} else {
			m, err = q.Receive(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
		}
		if err != nil && !errors.Is(err, engine.ErrCorrupt) {
			return n, errors.Join(err, w.Flush())
		}
		// m.Body is valid: the message is neither deleted nor expired yet.
		if err != nil {
			// A damaged record has no body to print: say so, on its own
			// stream, and go on (it is handed out like any message and
			// comes back after its deadline unless deleted).
			damaged++
			fmt.Fprintf(errOut, "pagelog queue receive: offset %d is damaged (delete it to skip it): %s\n",
				m.Offset, strings.TrimPrefix(err.Error(), "pagelog: "))
			if !asJSON {
				continue
			}
		}
		if asJSON {
			writeMessageJSON(w, m, err)
		} else {
			w.WriteString(strconv.FormatUint(m.Offset, 10))
			w.WriteByte('\t')
			writeEscaped(w, m.Body)
			w.WriteByte('\n')
		}
		if ferr := w.Flush(); ferr != nil {
			return n, fmt.Errorf("write stdout: %w", ferr)
		}
	}
	return n, nil
}

// errDamaged: receive handed out damaged messages (named as they came).
var errDamaged = errors.New("damaged messages received")

// writeEscaped writes b so that it holds no newline or tab: \n, \t, \r and
// \\ for those bytes and the backslash, \xNN for other control bytes and
// for bytes that are not part of valid UTF-8.
func writeEscaped(w *bufio.Writer, b []byte) {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(w, "\\x%02x", b[0])
		case r == '\n':
			w.WriteString(`\n`)
		case r == '\t':
			w.WriteString(`\t`)
		case r == '\r':
			w.WriteString(`\r`)
		case r == '\\':
			w.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(w, "\\x%02x", byte(r))
		default:
			w.Write(b[:size])
		}
		b = b[size:]
	}
}

// writeMessageJSON writes one message as a JSON object and a newline; a
// damaged one carries its error.
func writeMessageJSON(w *bufio.Writer, m queue.Message, err error) {
	o := map[string]any{"offset": m.Offset, "receives": m.Receives, "deadline": m.Deadline.Format(time.RFC3339Nano)}
	if m.Group != "" {
		o["group"] = m.Group
	}
	writeJSONBody(w, o, m.Body, err)
}

// writeJSONBody adds body (as body, or body_base64 when it is not UTF-8)
// and err to o, and writes o as one JSON line.
func writeJSONBody(w *bufio.Writer, o map[string]any, body []byte, err error) {
	if utf8.Valid(body) {
		o["body"] = string(body)
	} else {
		o["body_base64"] = base64.StdEncoding.EncodeToString(body)
	}
	if err != nil {
		o["error"] = strings.TrimPrefix(err.Error(), "pagelog: ")
	}
	b, _ := json.Marshal(o)
	w.Write(b)
	w.WriteByte('\n')
}

func runQueueDelete(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue delete", "(--dir D | --store D --queue NAME) --offset N [--sync none|always|interval]",
		"Deletes the message at offset N: it is never handed out again. It opens the\n"+
			"queue itself, so it runs only while no other process has the queue open;\n"+
			"it cannot know what another process received, so it deletes any message\n"+
			"of the queue, received or not (Queue.Discard). Deleting a message already\n"+
			"deleted succeeds; an offset beyond the end fails.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	offset := fs.Uint64("offset", 0, "`offset` of the message to delete (required)")
	syncName := fs.String("sync", engine.SyncNone.String(), "when the delete is acknowledged: none, always or interval")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	if !isSet(fs, "offset") {
		return usageError(fs, "missing --offset")
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}
	q, done, err := t.open(false, queue.Options{Log: engine.Options{Sync: policy}})
	if err != nil {
		return fail(stderr, "queue delete", err)
	}
	if err := done(q.Discard(*offset)); err != nil {
		return fail(stderr, "queue delete", err)
	}
	fmt.Fprintf(stdout, "deleted %d\n", *offset)
	return 0
}

func runQueueRedrive(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("queue redrive", "(--dir D | --store D --queue NAME) [-n N] [--sync none|always|interval]",
		"Moves up to N dead letters (all with -n 0, the default) of the queue in D\n"+
			"back into it as new messages, oldest first: each keeps its body and group,\n"+
			"starts again at 0 receives, and records its dead-letter offset as its\n"+
			"origin. Prints how many it moved.\n\n"+queueAbout, stderr)
	t := targetFlags(fs)
	n := fs.Int("n", 0, "most dead letters to move (0: all)")
	syncName := fs.String("sync", engine.SyncNone.String(), "when the moves are acknowledged: none, always or interval")
	if st := parseFlags(fs, args); st >= 0 {
		return st
	}
	if st := t.check(fs); st >= 0 {
		return st
	}
	if *n < 0 {
		return usageError(fs, "-n %d: want 0 (all) or more", *n)
	}
	policy, err := engine.ParseSyncPolicy(*syncName)
	if err != nil {
		return usageError(fs, "--sync %q: want none, always or interval", *syncName)
	}
	if !t.inStore() {
		if ok, _ := queue.IsQueue(queue.DeadLetterPath(t.dir)); !ok {
			if ok, err := queue.IsQueue(t.dir); err != nil || !ok {
				return fail(stderr, "queue redrive", fmt.Errorf("%w: %s", queue.ErrNotQueue, t.dir))
			}
			fmt.Fprintln(stdout, "redrove 0")
			return 0
		}
	}
	q, done, err := t.open(false, queue.Options{Log: engine.Options{Sync: policy}})
	if err != nil {
		return fail(stderr, "queue redrive", err)
	}
	moved, err := q.Redrive(*n)
	if errors.Is(err, queue.ErrNoDeadLetters) && t.inStore() {
		err = nil // a store queue without NAME.dead: nothing to move
	}
	if err = done(err); err != nil {
		return fail(stderr, "queue redrive", fmt.Errorf("%d moved: %w", moved, err))
	}
	fmt.Fprintf(stdout, "redrove %d\n", moved)
	return 0
}
