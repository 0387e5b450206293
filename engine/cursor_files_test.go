package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/testkit"
)

// cursorAt makes a cursor called name of the log in dir committed at pos.
func cursorAt(t *testing.T, dir, name string, pos uint64) {
	t.Helper()
	c := mustCursor(t, dir, name, CursorOptions{})
	if err := c.Seek(pos); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCursorRefusesALinkInPlaceOfItsFile(t *testing.T) {
	dir := closedLog(t)
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, cursorDir), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, cursorDir, "c")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	if c, err := OpenCursor(dir, "c", CursorOptions{}); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), link) {
		if err == nil {
			c.Close()
		}
		t.Errorf("OpenCursor through a link: %v, want ErrNotRegular naming %s", err, link)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep" {
		t.Fatalf("the file outside reads %q, %v: written through the link", b, err)
	}
	infos, err := Cursors(dir)
	if err != nil || len(infos) != 1 || infos[0].Name != "c" || !strings.Contains(infos[0].Damaged, "symbolic link") {
		t.Fatalf("Cursors: %+v, %v; want c listed as a symbolic link", infos, err)
	}
}

func TestCursorRefusesAFIFOInPlaceOfItsFile(t *testing.T) {
	dir := closedLog(t)
	if err := os.Mkdir(filepath.Join(dir, cursorDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Mkfifo(filepath.Join(dir, cursorDir, "c")); err != nil {
		t.Fatal(err)
	}
	err := returns(t, "OpenCursor", func() error {
		c, err := OpenCursor(dir, "c", CursorOptions{})
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenCursor of a FIFO: %v, want ErrNotRegular", err)
	}
	var infos []CursorInfo
	returns(t, "Cursors", func() (err error) { infos, err = Cursors(dir); return err })
	if len(infos) != 1 || !strings.Contains(infos[0].Damaged, "FIFO") {
		t.Fatalf("Cursors: %+v; want c listed as a FIFO", infos)
	}
}

func TestCursorRefusesALinkInPlaceOfItsDirectory(t *testing.T) {
	dir := closedLog(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, cursorDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCursor(dir, "c", CursorOptions{}); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenCursor under a linked directory: %v, want ErrNotRegular", err)
	}
	if list, _ := os.ReadDir(outside); len(list) != 0 {
		t.Fatalf("a file was made in the directory the link points to: %v", list)
	}
	if _, err := Cursors(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Cursors under a linked directory: %v, want ErrNotRegular", err)
	}
}

func TestCursorOfALogMadeAgainStartsAtItsFirstRecord(t *testing.T) {
	dir := closedLog(t)
	cursorAt(t, dir, "c", 15)
	// The log is removed and made again in the same directory; cursors/
	// stays.
	list, _ := os.ReadDir(dir)
	for _, e := range list {
		if e.Name() != cursorDir {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	l := mustOpen(t, dir, Options{})
	appendN(t, l, 20, mixedSize)
	infos, err := Cursors(dir)
	if err != nil || len(infos) != 1 || infos[0].Position != 0 || !strings.Contains(infos[0].Damaged, "made again") {
		t.Fatalf("Cursors: %+v, %v; want c at 0, damaged: another log's", infos, err)
	}
	c := mustCursor(t, dir, "c", CursorOptions{})
	if c.Position() != 0 || len(c.Notes()) != 1 || !strings.Contains(c.Notes()[0], "made again") {
		t.Fatalf("position %d, notes %q: want 0 and a note", c.Position(), c.Notes())
	}
	nextWant(t, c, 0)
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	// It belongs to the new log now.
	c = mustCursor(t, dir, "c", CursorOptions{})
	if c.Position() != 1 || len(c.Notes()) != 0 {
		t.Fatalf("reopened: position %d, notes %q; want 1 and none", c.Position(), c.Notes())
	}
}

func TestCursorFileOfVersionOneTakesItsLogIdentity(t *testing.T) {
	dir := closedLog(t)
	// A log and a cursor from before identities: no log.id, a 64-byte
	// position file.
	if err := os.Remove(filepath.Join(dir, logIDName)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, cursorFileSize)
	encodeSlot(b[cursorSlotSize:], 1, 7, 0)
	if err := os.Mkdir(filepath.Join(dir, cursorDir), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, cursorDir, "old")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c := mustCursor(t, dir, "old", CursorOptions{})
	if c.Position() != 7 || len(c.Notes()) != 0 {
		t.Fatalf("a version-1 file on a log without identity: position %d, notes %q", c.Position(), c.Notes())
	}
	_ = c.Close()
	// The next writable open gives the log its identity; the cursor takes it.
	if err := openAndClose(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	id, ok, err := readLogID(dir)
	if !ok || err != nil {
		t.Fatalf("log.id after a writable open: %v, %v", ok, err)
	}
	c = mustCursor(t, dir, "old", CursorOptions{})
	if c.Position() != 7 || len(c.Notes()) != 0 {
		t.Fatalf("a version-1 file: position %d, notes %q", c.Position(), c.Notes())
	}
	_ = c.Close()
	got, _ := os.ReadFile(path)
	if len(got) != cursorIDEnd || !bytes.Equal(got[cursorIDAt:], cursorIDSlot(id, true)) || !bytes.Equal(got[cursorSlotSize:cursorFileSize], b[cursorSlotSize:]) {
		t.Fatalf("the file after the open: % x", got)
	}
}

// newerSlotBytes is a slot that checks out under version 2.
func newerSlotBytes() []byte {
	s := make([]byte, cursorSlotSize)
	s[0] = cursorVersion + 1
	binary.BigEndian.PutUint64(s[4:], 9)
	binary.BigEndian.PutUint32(s[28:], checkpoint.Sum(s[:28]))
	return s
}

func TestCursorNeverOverwritesANewerSlotBesideAnOlderOne(t *testing.T) {
	dir := closedLog(t)
	cursorAt(t, dir, "c", 5)
	path := filepath.Join(dir, cursorDir, "c")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The file ends with the start and one commit: slot 0 holds the
	// newest version-1 commit, slot 1 becomes a newer version's.
	copy(b[cursorSlotSize:], newerSlotBytes())
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCursor(dir, "c", CursorOptions{})
	if !errors.Is(err, ErrBadFile) || !errors.Is(err, ErrNewerFile) {
		if err == nil {
			c.Close()
		}
		t.Fatalf("OpenCursor: %v, want ErrBadFile and ErrNewerFile", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
		t.Fatalf("the file was changed:\n% x\nwant\n% x", got, b)
	}
	if infos, err := Cursors(dir); err != nil || len(infos) != 1 || !strings.Contains(infos[0].Damaged, "newer version") {
		t.Fatalf("Cursors: %+v, %v", infos, err)
	}
}

// A cursor's file is rewritten in place: a hard link in its place (to a
// file outside the log, which O_NOFOLLOW does not stop) is refused, never
// written through, and listed as damaged.
func TestCursorRefusesAHardLinkInPlaceOfItsFile(t *testing.T) {
	dir := closedLog(t)
	outside := filepath.Join(dir, "..", "outside-"+filepath.Base(dir))
	keep := bytes.Repeat([]byte("keep this, it is not a cursor. "), 8)
	if err := os.WriteFile(outside, keep, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(outside) })
	if err := os.Mkdir(filepath.Join(dir, cursorDir), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, cursorDir, "c")
	if err := os.Link(outside, link); err != nil {
		t.Skip("no hard links here:", err)
	}
	if c, err := OpenCursor(dir, "c", CursorOptions{}); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), link) {
		if err == nil {
			c.Close()
		}
		t.Errorf("OpenCursor through a hard link: %v, want ErrNotRegular naming %s", err, link)
	}
	if b, err := os.ReadFile(outside); err != nil || !bytes.Equal(b, keep) {
		t.Fatalf("the file outside reads %q, %v: written through the hard link", b, err)
	}
	infos, err := Cursors(dir)
	if err != nil || len(infos) != 1 || infos[0].Name != "c" || !strings.Contains(infos[0].Damaged, "link") {
		t.Fatalf("Cursors: %+v, %v; want c listed as damaged", infos, err)
	}
	// Once the link is gone, the cursor is made again.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	mustCursor(t, dir, "c", CursorOptions{}).Close()
}
