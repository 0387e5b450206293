package queue

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/testkit"
)

// The files of a store under damage: every file of every log of a store
// flipped, cut, removed, or replaced by a FIFO, a symbolic link or a
// directory; foreign files put beside them; whole directories removed or
// replaced. Whatever is done, OpenStore (and StatStore, StoreMessages)
// returns an error or opens with the damage reported, never panics, never
// hangs, and never hands out a message in a queue other than the one it
// was sent to: every body here starts with the name of its queue.

// storeFilesSegment keeps the template store's logs small, with several
// segments in its message log.
const storeFilesSegment = 16 << 10

// storeFilesFixtures are the store every case damages a copy of, another
// store with other queues, and a queue directory.
type storeFilesFixtures struct {
	template, foreign, queueDir string
}

func newStoreFilesFixtures(t *testing.T) storeFilesFixtures {
	t.Helper()
	base := t.TempDir()
	f := storeFilesFixtures{
		template: filepath.Join(base, "store"),
		foreign:  filepath.Join(base, "foreign"),
		queueDir: filepath.Join(base, "queue"),
	}
	if err := errors.Join(
		buildFilesStore(f.template, []string{"a", "b", "c"}),
		buildFilesStore(f.foreign, []string{"x", "y"}),
		buildFilesQueue(f.queueDir)); err != nil {
		t.Fatal(err)
	}
	return f
}

// filesBody is message i of queue name: its queue's name first.
func filesBody(name string, i int) []byte {
	return fmt.Appendf(nil, "%s:%d:%s", name, i, strings.Repeat("x", 700))
}

// bodyQueue returns the queue a body of filesBody names.
func bodyQueue(b []byte) string {
	name, _, _ := bytes.Cut(b, []byte(":"))
	return string(name)
}

// buildFilesStore makes a store in dir with the queues names (each with
// messages, deletes and receive counts), a dead-letter queue of the first,
// and a queue deleted and created again whose old messages must never come
// back.
func buildFilesStore(dir string, names []string) error {
	s, err := OpenStore(dir, StoreOptions{Log: engine.Options{SegmentBytes: storeFilesSegment}, MaxReceives: 5})
	if err != nil {
		return err
	}
	send := func(name, as string, n int) error {
		q, err := s.Queue(name)
		if err != nil {
			return err
		}
		for i := range n {
			if _, err := q.Send(filesBody(as, i)); err != nil {
				return err
			}
		}
		return nil
	}
	var errs []error
	for _, name := range names {
		errs = append(errs, send(name, name, 20))
	}
	gone := names[0] + "-gone"
	errs = append(errs, send(gone, gone+"-old", 5), s.DeleteQueue(gone), send(gone, gone, 3))
	errs = append(errs, send(names[0]+deadSuffix, names[0], 2))
	for i, name := range names {
		q, err := s.Queue(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for range 3 + i {
			m, ok, err := q.TryReceive()
			if err != nil || !ok {
				errs = append(errs, fmt.Errorf("receive of %s: %v %v", name, ok, err))
				break
			}
			if i%2 == 0 {
				errs = append(errs, q.Delete(m.Offset))
			} else {
				errs = append(errs, q.Release(m.Offset))
			}
		}
	}
	errs = append(errs, s.Close())
	return errors.Join(errs...)
}

func buildFilesQueue(dir string) error {
	q, err := Open(dir, Options{Log: engine.Options{SegmentBytes: storeFilesSegment}})
	if err != nil {
		return err
	}
	var errs []error
	for i := range 10 {
		_, err := q.Send(filesBody("queuedir", i))
		errs = append(errs, err)
	}
	m, _, err := q.TryReceive()
	errs = append(errs, err, q.Delete(m.Offset), q.Close())
	return errors.Join(errs...)
}

// storeFilesCheck opens the store in dir every way a program or tool
// does and fails t on a panic, a hang, or a message handed out (or read)
// in a queue it was not sent to. It returns OpenStore's error.
func storeFilesCheck(t *testing.T, dir string) error {
	t.Helper()
	var openErr error
	done := make(chan string, 1)
	go func() {
		var failure string
		defer func() {
			if p := recover(); p != nil {
				failure = fmt.Sprintf("panic: %v", p)
			}
			done <- failure
		}()
		failure, openErr = storeFilesLook(dir)
	}()
	select {
	case f := <-done:
		if f != "" {
			t.Fatal(f)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the store's open hangs")
	}
	return openErr
}

// storeFilesLook does what storeFilesCheck checks; it returns a failure
// ("" for none) and OpenStore's error.
func storeFilesLook(dir string) (string, error) {
	// Read-only first: StatStore and StoreMessages read the files as
	// they are, before an open repairs anything.
	if st, err := StatStore(dir); err == nil {
		for _, d := range st.Deepest {
			var bad string
			c := bodyCheck{name: d.Name}
			err := StoreMessages(dir, d.Name, func(m Stored) bool {
				if !c.ok(m.Body) {
					bad = fmt.Sprintf("StoreMessages of %q reads %.20q", d.Name, m.Body)
					return false
				}
				return true
			})
			if bad != "" {
				return bad, nil
			}
			if err != nil && !errors.Is(err, engine.ErrCorrupt) {
				// Any error is allowed; its text must say something.
				if err.Error() == "" {
					return "StoreMessages: an empty error", nil
				}
			}
		}
	} else if err.Error() == "" {
		return "StatStore: an empty error", nil
	}
	var openErr error
	for round := range 2 { // the open, then a reopen after its repairs
		s, err := OpenStore(dir, StoreOptions{})
		if err != nil {
			if err.Error() == "" {
				return "OpenStore: an empty error", nil
			}
			if round == 0 {
				openErr = err
			}
			return "", openErr
		}
		for _, name := range s.Names() {
			q, err := s.Queue(name)
			if err != nil {
				continue // a queue that does not open says why
			}
			c := bodyCheck{name: name}
			for {
				m, ok, err := q.TryReceive()
				if err != nil || !ok {
					break
				}
				if !c.ok(m.Body) {
					_ = s.Close()
					return fmt.Sprintf("queue %q hands out %.20q", name, m.Body), nil
				}
			}
		}
		// A queue created now gets an id no record names.
		if q, err := s.Queue("fresh"); err == nil {
			if m, ok, _ := q.TryReceive(); ok {
				_ = s.Close()
				return fmt.Sprintf("a new queue hands out %.20q", m.Body), nil
			}
		}
		_ = s.Close()
	}
	return "", openErr
}

// bodyCheck checks the bodies of one queue: each names the queue, or,
// for a queue deleted and created again whose records of both are lost
// with a cut names log (the queue is then its old self), NAME-old; never
// both kinds in one queue.
type bodyCheck struct {
	name     string
	own, old bool
}

func (c *bodyCheck) ok(b []byte) bool {
	switch bodyQueue(b) {
	case trimDead(c.name):
		c.own = true
	case trimDead(c.name) + "-old":
		c.old = true
	default:
		return false
	}
	return !(c.own && c.old)
}

// storeFilesDamage is one way to damage a copy of the template store.
type storeFilesDamage struct {
	name string
	do   func(dir string) error
}

// storeFilesDamages lists the damages of every file and directory of the
// template store.
func storeFilesDamages(t *testing.T, f storeFilesFixtures) []storeFilesDamage {
	t.Helper()
	var out []storeFilesDamage
	add := func(name string, do func(dir string) error) {
		out = append(out, storeFilesDamage{name, do})
	}
	outside := t.TempDir()
	for _, sub := range []string{storeNamesDir, storeHeadsDir, storeMessagesDir, storeDeletesDir, storeReceivesDir} {
		entries, err := os.ReadDir(filepath.Join(f.template, sub))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range entries {
			if !storeFilesFull && sub == storeMessagesDir && strings.Contains(e.Name(), ".") &&
				!strings.HasPrefix(e.Name(), "log.") && !strings.HasPrefix(e.Name(), entries[0].Name()[:20]) && i < len(entries)-3 {
				continue // the middle segments of the message log: as the first
			}
			rel := filepath.Join(sub, e.Name())
			b, err := os.ReadFile(filepath.Join(f.template, rel))
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range flipPositions(sub, e.Name(), b) {
				add(fmt.Sprintf("%s/flip-%d", rel, at), func(dir string) error {
					return flipByte(filepath.Join(dir, rel), at, 0xff)
				})
			}
			if len(b) <= 64 && (storeFilesFull || e.Name() == "log.meta" && sub == storeNamesDir) {
				for bit := range 8 * len(b) {
					if !storeFilesFull && bit%8 != bit/8%8 {
						continue // one bit of each byte
					}
					add(fmt.Sprintf("%s/bit-%d", rel, bit), func(dir string) error {
						return flipByte(filepath.Join(dir, rel), bit/8, 1<<(bit%8))
					})
				}
			}
			for _, n := range cutLengths(b) {
				add(fmt.Sprintf("%s/cut-%d", rel, n), func(dir string) error {
					return os.Truncate(filepath.Join(dir, rel), n)
				})
			}
			add(rel+"/removed", func(dir string) error { return os.Remove(filepath.Join(dir, rel)) })
			add(rel+"/fifo", func(dir string) error {
				p := filepath.Join(dir, rel)
				return errors.Join(os.Remove(p), testkit.Mkfifo(p))
			})
			add(rel+"/symlink", func(dir string) error {
				p := filepath.Join(dir, rel)
				o := filepath.Join(outside, strings.ReplaceAll(dir+rel, "/", "_"))
				return errors.Join(os.WriteFile(o, b, 0o600), os.Remove(p), os.Symlink(o, p))
			})
			add(rel+"/directory", func(dir string) error {
				p := filepath.Join(dir, rel)
				return errors.Join(os.Remove(p), os.Mkdir(p, 0o700))
			})
			if e.Name() == "log.meta" {
				add(rel+"/newer", func(dir string) error {
					nb := slices.Clone(b)
					nb[0]++
					return os.WriteFile(filepath.Join(dir, rel), checkpoint.Seal(nb), 0o600)
				})
			}
			if strings.HasSuffix(e.Name(), ".log") {
				if fileExists(filepath.Join(f.foreign, rel)) {
					add(rel+"/foreign-store", func(dir string) error {
						return testkit.CopyFile(filepath.Join(f.foreign, rel), filepath.Join(dir, rel))
					})
				}
				if fileExists(filepath.Join(f.queueDir, e.Name())) {
					add(rel+"/queue-dir-segment", func(dir string) error {
						return testkit.CopyFile(filepath.Join(f.queueDir, e.Name()), filepath.Join(dir, rel))
					})
				}
			}
		}
		add(sub+"/removed", func(dir string) error { return os.RemoveAll(filepath.Join(dir, sub)) })
		add(sub+"/emptied", func(dir string) error {
			p := filepath.Join(dir, sub)
			return errors.Join(os.RemoveAll(p), os.Mkdir(p, 0o700))
		})
		add(sub+"/file", func(dir string) error {
			p := filepath.Join(dir, sub)
			return errors.Join(os.RemoveAll(p), os.WriteFile(p, []byte("x"), 0o600))
		})
		add(sub+"/fifo", func(dir string) error {
			p := filepath.Join(dir, sub)
			return errors.Join(os.RemoveAll(p), testkit.Mkfifo(p))
		})
		add(sub+"/symlink", func(dir string) error {
			p := filepath.Join(dir, sub)
			o := filepath.Join(outside, strings.ReplaceAll(dir+sub, "/", "_"))
			return errors.Join(os.Rename(p, o), os.Symlink(o, p))
		})
		add(sub+"/foreign-store", func(dir string) error {
			p := filepath.Join(dir, sub)
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			return testkit.CopyDir(filepath.Join(f.foreign, sub), p, true)
		})
		add(sub+"/queue-dir", func(dir string) error {
			p := filepath.Join(dir, sub)
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			return testkit.CopyDir(f.queueDir, p, true)
		})
		add(sub+"/foreign-segment-beside", func(dir string) error {
			return testkit.CopyFile(filepath.Join(f.foreign, sub, "00000000000000000000.log"),
				filepath.Join(dir, sub, "00000000000000100000.log"))
		})
		add(sub+"/queue-files-beside", func(dir string) error {
			return testkit.CopyDir(f.queueDir, filepath.Join(dir, sub), true)
		})
		add(sub+"/garbage-segment", func(dir string) error {
			g := bytes.Repeat([]byte{0xa5, 0x5a, 0, 0xff}, 1024)
			return errors.Join(
				os.WriteFile(filepath.Join(dir, sub, "00000000000000000077.log"), g, 0o600),
				os.WriteFile(filepath.Join(dir, sub, "00000000000000000077.index"), g[:100], 0o600))
		})
		add(sub+"/queue-dir-inside", func(dir string) error {
			return testkit.CopyDir(f.queueDir, filepath.Join(dir, sub, "q"), true)
		})
		add(sub+"/store-inside", func(dir string) error {
			return testkit.CopyDir(f.foreign, filepath.Join(dir, sub, "s"), true)
		})
	}
	add("queue-dir-inside", func(dir string) error {
		return testkit.CopyDir(f.queueDir, filepath.Join(dir, "q"), true)
	})
	add("store-inside", func(dir string) error {
		return testkit.CopyDir(f.foreign, filepath.Join(dir, "s"), true)
	})
	add("queue-files-beside", func(dir string) error { return testkit.CopyDir(f.queueDir, dir, true) })
	return out
}

// flipPositions returns where to flip bytes of the file name of log sub:
// positions spread over its written bytes (every one of them with
// PAGELOG_STORE_FILES_FULL=1, a run of minutes), its first unwritten byte
// and its last.
func flipPositions(sub, name string, b []byte) []int {
	used := len(bytes.TrimRight(b, "\x00"))
	if used == 0 {
		return nil
	}
	n := 1
	if strings.HasSuffix(name, ".log") && (sub == storeNamesDir || sub == storeHeadsDir) {
		n = 8 // the store's own records
	}
	step := max(1, used/n)
	if storeFilesFull {
		step = 1
	}
	var out []int
	for i := 0; i < used; i += step {
		out = append(out, i)
	}
	if used < len(b) {
		out = append(out, used, len(b)-1)
	}
	return out
}

// storeFilesFull runs every flip and bit flip of the sweep.
var storeFilesFull = os.Getenv("PAGELOG_STORE_FILES_FULL") == "1"

// cutLengths returns the lengths to cut a file of b to: nothing, odd
// lengths, one byte short of its written end.
func cutLengths(b []byte) []int64 {
	used := int64(len(bytes.TrimRight(b, "\x00")))
	out := []int64{0, 7}
	more := []int64{used - 1}
	if storeFilesFull {
		out = append(out, 1)
		more = append(more, used/2|1, used+1, int64(len(b))-1)
	}
	for _, n := range more {
		if n > 7 && n < int64(len(b)) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func flipByte(path string, at int, mask byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[at] ^= mask
	return os.WriteFile(path, b, 0o600)
}

func TestStoreFilesDamagedMissingOrForeignAreReportedNeverHandedOut(t *testing.T) {
	f := newStoreFilesFixtures(t)
	for _, d := range storeFilesDamages(t, f) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel() // their fsyncs overlap
			dir := filepath.Join(t.TempDir(), "store")
			if err := testkit.CopyDir(f.template, dir, true); err != nil {
				t.Fatal(err)
			}
			if err := d.do(dir); err != nil {
				t.Fatal(err)
			}
			err := storeFilesCheck(t, dir)
			if testing.Verbose() && err != nil {
				t.Logf("OpenStore: %v", err)
			}
		})
	}
}

// Two stores made apart give out different queue ids: the names log of
// one (a whole names/ directory, or its segment) put in the other names
// no queue whose records are there, so none of its queues hands out the
// other store's messages, which are reported as orphans.
func TestStoreNamesLogOfAnotherStoreNeverNamesItsMessages(t *testing.T) {
	for _, whole := range []bool{true, false} {
		t.Run(fmt.Sprintf("whole directory %v", whole), func(t *testing.T) {
			dir, other := t.TempDir(), t.TempDir()
			for _, d := range []struct {
				dir   string
				names []string
			}{{dir, []string{"a", "b"}}, {other, []string{"x", "y"}}} {
				s := openTestStore(t, d.dir, StoreOptions{})
				for _, name := range d.names {
					if _, err := mustQueue(t, s, name).Send(filesBody(name, 0)); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if whole {
				if err := os.RemoveAll(filepath.Join(dir, storeNamesDir)); err != nil {
					t.Fatal(err)
				}
				if err := testkit.CopyDir(filepath.Join(other, storeNamesDir), filepath.Join(dir, storeNamesDir), true); err != nil {
					t.Fatal(err)
				}
			} else {
				seg := filepath.Join(storeNamesDir, "00000000000000000000.log")
				if err := testkit.CopyFile(filepath.Join(other, seg), filepath.Join(dir, seg)); err != nil {
					t.Fatal(err)
				}
			}
			s := openTestStore(t, dir, StoreOptions{})
			defer s.Close()
			if got := s.Recovery().Orphans; got != 2 {
				t.Errorf("Orphans = %d, want the 2 messages no name of the names log holds", got)
			}
			for _, name := range s.Names() {
				if m, ok, _ := mustQueue(t, s, name).TryReceive(); ok {
					t.Errorf("queue %q hands out %.20q, a message of the store's own queues", name, m.Body)
				}
			}
		})
	}
}

// OpenStore of a directory that holds a log or a queue (and no store)
// fails with ErrNotStore and makes nothing in it: the log's files are not
// a store's, and a queue's deletes/ and receives/ would be taken for the
// store's shared logs.
func TestOpenStoreOnALogOrQueueDirectoryIsAnError(t *testing.T) {
	logDir, queueDir := t.TempDir(), t.TempDir()
	l, err := engine.Open(logDir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append([]byte("a record")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := buildFilesQueue(queueDir); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{logDir, queueDir} {
		s, err := OpenStore(dir, StoreOptions{})
		if err == nil {
			s.Close()
			t.Fatalf("OpenStore of %s opens it as a store", dir)
		}
		if !errors.Is(err, ErrNotStore) {
			t.Errorf("OpenStore of a log or queue directory = %v, want ErrNotStore", err)
		}
		if _, err := os.Lstat(filepath.Join(dir, storeNamesDir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("OpenStore made %s/ in %s (%v)", storeNamesDir, dir, err)
		}
	}
}

// Open of a store's directory fails with ErrNotQueue and writes nothing
// in it: the store's deletes/ and receives/ logs are shared by its queues.
func TestOpenOnAStoreDirectoryIsAnError(t *testing.T) {
	dir := t.TempDir()
	storeOfOneMessage(t, dir)
	q, err := Open(dir, Options{})
	if err == nil {
		q.Close()
		t.Fatal("Open of a store's directory opens it as a queue")
	}
	if !errors.Is(err, ErrNotQueue) {
		t.Errorf("Open of a store's directory = %v, want ErrNotQueue", err)
	}
	if ok, _ := engine.IsLog(dir); ok {
		t.Error("Open made a log in the store's directory")
	}
}

// A store whose log directory is a symbolic link (to a directory outside
// the store) is refused, by OpenStore and by StatStore: the store would
// write its files wherever the link points.
func TestStoreLogDirectoryLinkedElsewhereIsRefused(t *testing.T) {
	for _, sub := range storeLogDirs {
		t.Run(sub, func(t *testing.T) {
			dir, outside := t.TempDir(), filepath.Join(t.TempDir(), sub)
			storeOfOneMessage(t, dir)
			p := filepath.Join(dir, sub)
			if err := os.Rename(p, outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
			if s, err := OpenStore(dir, StoreOptions{}); !errors.Is(err, engine.ErrNotRegular) {
				if err == nil {
					s.Close()
				}
				t.Errorf("OpenStore with %s/ a link = %v, want ErrNotRegular", sub, err)
			}
			if _, err := StatStore(dir); !errors.Is(err, engine.ErrNotRegular) {
				t.Errorf("StatStore with %s/ a link = %v, want ErrNotRegular", sub, err)
			}
		})
	}
}

// A names log that lost a queue's name record (its segment removed, or a
// directory in its place) loses the queue: the store reports it as damage
// naming the queue's id and its orphaned records, not only as orphans.
func TestStoreNamesLogLosingANameIsReportedAsDamage(t *testing.T) {
	for _, how := range []string{"removed", "directory"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestStore(t, dir, StoreOptions{})
			q := mustQueue(t, s, "a")
			for range 5 {
				mustSend(t, q, "x")
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, storeNamesDir, "00000000000000000000.log")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if how == "directory" {
				if err := os.Mkdir(p, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			s, err := OpenStore(dir, StoreOptions{})
			if err != nil {
				return // a clear refusal is as good
			}
			defer s.Close()
			rec := s.Recovery()
			found := false
			for _, d := range rec.Damaged {
				found = found || strings.Contains(d, "5 records") && strings.Contains(d, "no name")
			}
			if !found || rec.Orphans != 5 || len(s.Names()) != 0 {
				t.Fatalf("Recovery: damaged %q, orphans %d, names %v; want the lost name reported with its 5 records", rec.Damaged, rec.Orphans, s.Names())
			}
		})
	}
}
