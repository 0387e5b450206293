package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"github.com/pagelog/pagelog/engine"
)

// Options configure a Queue. Zero fields mean the defaults.
type Options struct {
	// Log configures the message log. Its Sync policy applies to the
	// delete log, the receive-count log and the dead-letter queue too.
	// ReadOnly is refused.
	Log engine.Options
	// Visibility is how long a received message stays hidden; default 30 s.
	Visibility time.Duration
	// CheckpointInterval is how often the head is written to queue.head
	// when it moved; default 1 s. Close writes it too.
	CheckpointInterval time.Duration
	// Clock is the source of time for deadlines, due times and timers; nil
	// means the system clock. Tests inject a fake one to make time pass at
	// will.
	Clock Clock

	// DefaultDelay is the delay of a Send, a SendBatch and a SendWith that
	// names neither a Delay nor a Due time; default 0, at most MaxDelay.
	DefaultDelay time.Duration
	// DedupWindow is how long a SendWith's DedupID is remembered; default
	// 5 minutes, at most MaxDedupWindow.
	DedupWindow time.Duration
	// MaxReceives moves a message received that many times without being
	// deleted to the dead-letter queue when it would be ready again; 0
	// means unlimited. With MaxReceives > 0 each hand-out's receive count
	// is written to the receive-count log before the body is handed out.
	MaxReceives int
	// DeadLetterDir is the directory of the dead-letter queue; default the
	// sibling directory "<dir>.dead". The queue's own directory, one
	// inside it and one that holds it are refused (ErrBadOptions), the
	// sibling too, once relative paths, symbolic links (dangling ones
	// too) and ".." are resolved as the system resolves them (a ".."
	// after a link goes up from the link's target). The dead-letter
	// queue is opened (and created) with the queue when MaxReceives > 0
	// or DeadLetterDir is set, and the sibling also when it holds a queue
	// already.
	DeadLetterDir string
	// MaxHeldSegments bounds the message-log segments that a message
	// which never finishes (stuck in flight, failing again and again,
	// delayed far ahead) holds on disk: when the oldest segment holds only
	// a few live messages (at most MaxMovedPerSegment and at most an
	// eighth of its records, or a single one, not counting messages
	// moved before: their copies gather in one segment) and more than
	// MaxHeldSegments segments follow it, those messages are copied to
	// the end of the log, each keeping the offset it is known by (see
	// Queue), and the next head checkpoint removes the segment. More
	// held messages than MaxHeldSegments segments hold are bounded by
	// their own size instead: the log keeps their copies, about as many
	// finished records, and MaxHeldSegments segments (see Held segments
	// in the package doc). A message in flight keeps the mapping its Message.Body points into
	// until its delete or deadline, and with it the disk space of a
	// removed segment (one segment per such message, for one visibility
	// timeout at most). 0 means the default, DefaultMaxHeldSegments;
	// negative is refused.
	MaxHeldSegments int
}

// SendOptions are a message's delivery options (SendWith).
type SendOptions struct {
	// Delay hides the message until Delay after the send. Delay and Due
	// are exclusive; when both are zero, Options.DefaultDelay applies.
	Delay time.Duration
	// Due hides the message until Due (a time in the past: ready now).
	Due time.Time
	// Group names the message's ordering group (1-128 bytes; "" for
	// none): within a group, messages are handed out one at a time, in
	// send order.
	Group string
	// DedupID makes a second send of the same id within
	// Options.DedupWindow append nothing and return the first send's
	// offset (1-128 bytes; "" for none).
	DedupID string
}

// Queue defaults and limits.
const (
	DefaultVisibility         = 30 * time.Second
	DefaultCheckpointInterval = time.Second
	DefaultDedupWindow        = 5 * time.Minute
	// MaxVisibility bounds how long a message may stay hidden: deadlines
	// are nanoseconds on the queue's own clock, and a year keeps every
	// one far from overflow.
	MaxVisibility = 365 * 24 * time.Hour
	// MaxDelay bounds a delay and how far ahead a due time may lie.
	MaxDelay = 365 * 24 * time.Hour
	// MaxDedupWindow bounds DedupWindow.
	MaxDedupWindow = 365 * 24 * time.Hour
	// MaxIDBytes is the longest Group or DedupID.
	MaxIDBytes = 128
	// DefaultMaxHeldSegments is the default of Options.MaxHeldSegments.
	DefaultMaxHeldSegments = 4
	// MaxMovedPerSegment is the most live messages the oldest segment may
	// hold for them to be moved out of it, messages moved before aside,
	// and the most one move copies (see Options.MaxHeldSegments).
	MaxMovedPerSegment = 64
)

// recycledSegments is how many spare segment files of its message log a
// queue keeps for reuse when Options.Log.RecycleSegments is 0: one, which
// with the next segment prepared ahead keeps the queue's disk what it is
// without reuse (its active segment plus one).
const recycledSegments = 1

func (o Options) withDefaults(dir string) (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: "+format, append([]any{engine.ErrBadOptions}, args...)...)
	}
	switch {
	case o.Log.ReadOnly:
		return bad("a queue cannot be opened read-only")
	case o.Visibility < 0 || o.Visibility > MaxVisibility:
		return bad("Visibility %v outside [0, %v] (0: %v)", o.Visibility, MaxVisibility, DefaultVisibility)
	case o.CheckpointInterval < 0:
		return bad("CheckpointInterval %v is negative (0: %v)", o.CheckpointInterval, DefaultCheckpointInterval)
	case o.DefaultDelay < 0 || o.DefaultDelay > MaxDelay:
		return bad("DefaultDelay %v outside [0, %v]", o.DefaultDelay, MaxDelay)
	case o.DedupWindow < 0 || o.DedupWindow > MaxDedupWindow:
		return bad("DedupWindow %v outside [0, %v] (0: %v)", o.DedupWindow, MaxDedupWindow, DefaultDedupWindow)
	case o.MaxReceives < 0:
		return bad("MaxReceives %d is negative (0: unlimited)", o.MaxReceives)
	case o.MaxHeldSegments < 0:
		return bad("MaxHeldSegments %d is negative (0: %d)", o.MaxHeldSegments, DefaultMaxHeldSegments)
	}
	if o.MaxHeldSegments == 0 {
		o.MaxHeldSegments = DefaultMaxHeldSegments
	}
	if o.Visibility == 0 {
		o.Visibility = DefaultVisibility
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.DedupWindow == 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.DeadLetterDir != "" {
		dead, err := checkDeadLetterDir(o.DeadLetterDir, dir)
		if err != nil {
			return o, err
		}
		o.DeadLetterDir = dead
	}
	return o, o.Log.Validate()
}

// checkDeadLetterDir refuses a dead-letter directory that is the queue's
// own, lies inside it (the queue would take the dead-letter queue's files
// for its own) or holds it, once both paths are resolved as the system
// resolves them (see resolvePath). It returns the path to open the
// dead-letter queue at: dead as it is, or its resolved form when dead has
// a ".." after a symbolic link, which filepath.Clean (and so every file
// path joined to it) would take to another directory than the system.
func checkDeadLetterDir(dead, dir string) (string, error) {
	d, err := resolvePath(dead)
	if err != nil {
		return "", fmt.Errorf("%w: DeadLetterDir %s: %w", engine.ErrBadOptions, dead, err)
	}
	q, err := resolvePath(dir)
	if err != nil {
		return "", fmt.Errorf("%w: queue directory %s: %w", engine.ErrBadOptions, dir, err)
	}
	var why string
	switch {
	case d == q:
		why = "is the queue's own directory"
	case within(d, q):
		why = "lies inside the queue's directory"
	case within(q, d):
		why = "holds the queue's directory"
	default:
		if c, err := resolvePath(filepath.Clean(dead)); err != nil || c != d {
			return d, nil
		}
		return dead, nil
	}
	return "", fmt.Errorf("%w: DeadLetterDir %s (%s) %s %s (%s): the dead-letter queue needs a directory of its own, beside the queue's",
		engine.ErrBadOptions, dead, d, why, dir, q)
}

// resolvePath returns the directory p names for the system: made
// absolute, each symbolic link replaced by its target (a dangling one
// too: creating the directory creates its target), and each ".." taking
// away the component before it once the links up to it are resolved, as
// the system does (filepath.Abs and Clean take "link/.." away as text,
// which names another directory when link points elsewhere). Components
// that do not exist yet follow as they are: they are to be created as
// directories. More than maxLinks links are refused, as the system does.
func resolvePath(p string) (string, error) {
	const sep = string(filepath.Separator)
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		p = wd + sep + p
	}
	vol := filepath.VolumeName(p)
	done, todo := vol+sep, p[len(vol):]
	links := 0
	for todo != "" {
		var c string
		c, todo, _ = strings.Cut(todo, sep)
		switch c {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, c)
		fi, err := os.Lstat(next)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			done = next // to be created
			continue
		case err != nil:
			return "", err
		case fi.Mode()&fs.ModeSymlink == 0:
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: more than %d symbolic links (a loop?)", p, maxLinks)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			v := filepath.VolumeName(target)
			done, target = v+sep, target[len(v):]
		}
		todo = target + sep + todo
	}
	return done, nil
}

// maxLinks is how many symbolic links resolvePath follows, as Linux's
// path lookup does (40).
const maxLinks = 40

// within reports whether path p lies below dir (both clean and absolute).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// DeadLetterPath returns the default dead-letter directory of the queue in
// dir: the sibling "<dir>.dead".
func DeadLetterPath(dir string) string { return filepath.Clean(dir) + ".dead" }

// attrs checks o and returns the attributes of a message sent at now
// (wall time) with default delay def: the due time in whole milliseconds,
// rounded up (none when it is not in the future), the group and the dedup
// id.
func (o SendOptions) attrs(now time.Time, def time.Duration) (engine.Attrs, error) {
	var a engine.Attrs
	bad := func(format string, args ...any) (engine.Attrs, error) {
		return a, fmt.Errorf("%w: "+format, append([]any{engine.ErrInvalidAttrs}, args...)...)
	}
	switch {
	case o.Delay != 0 && !o.Due.IsZero():
		return bad("both Delay and Due are set")
	case o.Delay < 0 || o.Delay > MaxDelay:
		return bad("Delay %v outside [0, %v]", o.Delay, MaxDelay)
	case !o.Due.IsZero() && o.Due.Sub(now) > MaxDelay:
		return bad("Due %v is more than %v ahead", o.Due, MaxDelay)
	case len(o.Group) > MaxIDBytes:
		return bad("Group of %d bytes, at most %d", len(o.Group), MaxIDBytes)
	case len(o.DedupID) > MaxIDBytes:
		return bad("DedupID of %d bytes, at most %d", len(o.DedupID), MaxIDBytes)
	}
	due := o.Due
	switch {
	case o.Delay > 0:
		due = now.Add(o.Delay)
	case due.IsZero() && def > 0:
		due = now.Add(def)
	}
	if !due.IsZero() {
		if ms := ceilMilli(due); time.UnixMilli(ms).After(now) {
			a.Due, a.HasDue = ms, true
		}
	}
	if o.Group != "" {
		a.Group = bytesOf(o.Group)
	}
	if o.DedupID != "" {
		a.Dedup = bytesOf(o.DedupID)
	}
	return a, nil
}

// bytesOf returns the bytes of s without copying them, for the attributes
// of a send: the log only reads them while it appends, and keeps nothing.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// ceilMilli returns t in Unix milliseconds, rounded up.
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}
