package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/regfile"
)

// Cursor position files (cursors/<name> in the log's directory).
//
// On-disk format: never change, bump the version instead. Two slots of 32
// bytes; commit number n goes into slot n mod 2, in place, so that a commit
// torn by a crash (or a power failure) damages only its own slot and the
// other one still holds the commit before it. The slot whose CRC-32C
// checks out with the higher commit number is the position.
//
//	byte  size  field (of a slot; slot 1 starts at byte 32)
//	0     1     version (1)
//	1     3     zero
//	4     8     commit number (uint64, from 1)
//	12    8     position (uint64): the offset the cursor resumes at
//	20    8     commit time (int64 Unix milliseconds)
//	28    4     CRC-32C of bytes 0..27 of the slot
//
// A slot of zeros was never written. A file with no slot that checks out
// (and not all zeros) is never trusted: the cursor starts again at the
// log's first record (at-least-once: records come again, none is
// skipped), and says so (Cursor.Notes, CursorInfo.Damaged). A slot that
// checks out under a higher version is a newer tool's: the cursor refuses
// to open (ErrNewerFile) rather than overwrite it. The holder of the
// cursor keeps an exclusive flock on the file while it is open.
//
// The identity slot, appended at byte 64 (a file of 64 bytes, as older
// versions wrote, has none: they read the two slots and leave the rest),
// names the log the position belongs to (log.id, logid.go):
//
//	byte  size  field (of the identity slot, at byte 64)
//	0     1     version (1)
//	1     3     zero
//	4     16    the log's identity
//	20    8     zero
//	28    4     CRC-32C of bytes 0..27 of the slot
//
// A cursor whose identity is not its log's (the log was removed and made
// again in the same directory, or lost its log.id) starts again at the
// log's first record and says so; one without an identity takes its log's.
const (
	cursorDir      = "cursors"
	cursorVersion  = 1
	cursorSlotSize = 32
	cursorFileSize = 2 * cursorSlotSize
	cursorIDAt     = cursorFileSize // the identity slot
	cursorIDSize   = 32
	cursorIDEnd    = cursorIDAt + cursorIDSize
	maxCursorName  = 100
)

// cursorIDSlot returns the identity slot for a log's identity: zeros when
// the log has none.
func cursorIDSlot(id logID, ok bool) []byte {
	b := make([]byte, cursorIDSize)
	if !ok {
		return b
	}
	b[0] = cursorVersion
	copy(b[4:20], id[:])
	binary.BigEndian.PutUint32(b[28:], checkpoint.Sum(b[:28]))
	return b
}

// foreignCursor says why the position of a cursor file b does not belong
// to the log whose identity is id (ok false: the log has none), or "" when
// it may: the identity slot is the log's, or missing (a file older than
// identities, or written before its log had one: it takes the log's).
func foreignCursor(b []byte, id logID, ok bool) string {
	if len(b) < cursorIDEnd {
		return ""
	}
	s := b[cursorIDAt:cursorIDEnd]
	switch {
	case bytes.Count(s, []byte{0}) == len(s):
		return ""
	case s[0] != cursorVersion || binary.BigEndian.Uint32(s[28:]) != checkpoint.Sum(s[:28]):
		return "its log identity is damaged"
	case !ok:
		return fmt.Sprintf("it belongs to log %x, and this log has no identity (%s missing or damaged)", s[4:20], logIDName)
	case !bytes.Equal(s[4:20], id[:]):
		return fmt.Sprintf("it belongs to log %x, not to this log, %s: the log was made again", s[4:20], id)
	}
	return ""
}

// newerSlot reports whether a slot of b (the two position slots and the
// identity slot) checks out under a version this build does not know: a
// newer tool's file, never overwritten, even beside a slot that checks
// out under this version.
func newerSlot(b []byte) (byte, bool) {
	for i := 0; i+cursorSlotSize <= len(b) && i < cursorIDEnd; i += cursorSlotSize {
		s := b[i : i+cursorSlotSize]
		if s[0] > cursorVersion && binary.BigEndian.Uint32(s[28:]) == checkpoint.Sum(s[:28]) {
			return s[0], true
		}
	}
	return 0, false
}

type cursorSlot struct {
	seq, pos uint64
	ms       int64
}

// readCursor returns the newest slot of a position file that checks out.
// why says what is wrong when no slot does and the file is not all zeros
// (a file never committed).
func readCursor(b []byte) (cursorSlot, bool, string) {
	var best cursorSlot
	found := false
	var whys []string
	for i := 0; i < 2; i++ {
		if len(b) < (i+1)*cursorSlotSize {
			whys = append(whys, fmt.Sprintf("slot %d: the file is %d bytes, want %d", i, len(b), cursorFileSize))
			continue
		}
		s := b[i*cursorSlotSize : (i+1)*cursorSlotSize]
		switch {
		case bytes.Count(s, []byte{0}) == len(s):
			continue
		case s[0] != cursorVersion:
			whys = append(whys, fmt.Sprintf("slot %d: version %d, this build reads %d", i, s[0], cursorVersion))
			continue
		case binary.BigEndian.Uint32(s[28:]) != checkpoint.Sum(s[:28]):
			whys = append(whys, fmt.Sprintf("slot %d: checksum fails", i))
			continue
		}
		slot := cursorSlot{seq: binary.BigEndian.Uint64(s[4:]), pos: binary.BigEndian.Uint64(s[12:]), ms: int64(binary.BigEndian.Uint64(s[20:]))}
		if !found || slot.seq > best.seq {
			best, found = slot, true
		}
	}
	if found || len(whys) == 0 && len(b) >= cursorFileSize {
		return best, found, ""
	}
	if len(whys) == 0 {
		return best, false, ""
	}
	return best, false, strings.Join(whys, "; ")
}

// encodeSlot fills a slot.
func encodeSlot(b []byte, seq, pos uint64, ms int64) {
	clear(b[:cursorSlotSize])
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint64(b[12:], pos)
	binary.BigEndian.PutUint64(b[20:], uint64(ms))
	binary.BigEndian.PutUint32(b[28:], checkpoint.Sum(b[:28]))
}

// Cursors lists the cursors of the log in dir, sorted by name: each one's
// committed position and its lag behind the log's end. It reads the files
// without their locks (a cursor may be open and committing). A name under
// cursors/ that is not a regular file (a symbolic link, a FIFO), a file a
// newer version wrote, and a cursor of another log (one made before in
// the same directory) are listed with Damaged saying so; the position of
// the last is where OpenCursor starts it again, the log's first record.
func Cursors(dir string) ([]CursorInfo, error) {
	l, err := OpenReadOnly(dir, Options{})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	next, first := l.Next(), l.First()
	d, err := regfile.OpenDir(filepath.Join(dir, cursorDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pagelog: cursors: %w", err)
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("pagelog: cursors: %w", err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	id, hasID, idErr := readLogID(dir)
	var out []CursorInfo
	for _, e := range entries {
		if checkCursorName(e.Name()) != nil {
			continue
		}
		info := CursorInfo{Name: e.Name(), Position: first}
		b, err := readCursorFile(d, e.Name())
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case errors.Is(err, ErrNotRegular):
			info.Damaged = err.Error()
		case err != nil:
			return nil, fmt.Errorf("pagelog: cursor %s: %w", e.Name(), err)
		}
		slot, ok, why := readCursor(b)
		foreign := ""
		if ok {
			foreign = foreignCursor(b, id, hasID)
		}
		switch v, newer := newerSlot(b); {
		case info.Damaged != "":
		case newer:
			info.Damaged = fmt.Sprintf("written by a newer version (a slot of version %d): never opened or overwritten by this one", v)
		case foreign != "" && idErr != nil:
			info.Damaged = fmt.Sprintf("%s (%v)", foreign, idErr)
		case foreign != "":
			info.Damaged = foreign + ": it starts again at the first record"
		case ok:
			info.Position = slot.pos
			info.Committed = time.UnixMilli(slot.ms)
		case why != "":
			info.Damaged = why
		}
		if info.Position < next {
			info.Lag = next - info.Position
		}
		out = append(out, info)
	}
	return out, nil
}

// readCursorFile reads a cursor's file in the cursors directory d, with
// regfile's checks: never through a link, never blocking.
func readCursorFile(d *os.File, name string) ([]byte, error) {
	f, err := regfile.OpenIn(d, name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := regfile.SoleName(f); err != nil {
		return nil, err // no cursor could open it
	}
	b := make([]byte, cursorIDEnd)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:n], nil
}
