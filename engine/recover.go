package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pagelog/pagelog/internal/record"
	"github.com/pagelog/pagelog/internal/regfile"
	"github.com/pagelog/pagelog/internal/segment"
)

// RecoverOptions choose what Recover may do beyond ordinary recovery.
type RecoverOptions struct {
	// TruncateAtDamage cuts the log at its first damaged record (and
	// removes everything after it). Without it damage is only reported:
	// it is never cut silently.
	TruncateAtDamage bool
}

// RecoverReport tells what Recover found and did.
type RecoverReport struct {
	Open             Recovery     // what opening the log found and did (torn tail cut, ...)
	Renamed          []string     // segment files renamed back to the base their first record names
	IndexesRewritten []string     // segment files whose index files were rewritten
	Damage           *RecordInfo  // the first damaged record, if any
	TruncatedAt      *uint64      // where the log was cut, with TruncateAtDamage
	After            VerifyReport // a verify of the log as Recover leaves it
}

// Recover opens the log in dir for writing, which cuts a torn tail of the
// active segment, removes leftover index files and rewrites a damaged
// log.meta, then rewrites every missing or damaged index and time index,
// and verifies every record. A segment file whose name does not match its
// first record (renamed by hand) is renamed back first, when its own name
// is free and the order of the segments allows it. With TruncateAtDamage
// it also cuts the log at the first damaged record, the only way damage is
// ever cut. It holds the writer's lock throughout: read-only openers beside
// it see the log as it was before it, or as it leaves it.
//
// A directory that holds no log is refused with ErrNoLog: Recover never
// creates a log.
func Recover(dir string, opts Options, ro RecoverOptions) (RecoverReport, error) {
	if err := Supported(); err != nil {
		return RecoverReport{}, err
	}
	if err := opts.validate(); err != nil {
		return RecoverReport{}, err
	}
	opts = opts.withDefaults()
	if ok, err := IsLog(dir); err != nil {
		return RecoverReport{}, err
	} else if !ok {
		return RecoverReport{}, fmt.Errorf("%w: %s", ErrNoLog, dir)
	}
	lock, err := lockDir(dir, opts.FileMode)
	if err != nil {
		return RecoverReport{}, err
	}
	var rep RecoverReport
	if rep.Renamed, err = renameMisnamed(dir); err != nil {
		_ = lock.Close()
		return rep, err
	}
	l, err := open(dir, opts, lock)
	if err != nil {
		_ = lock.Close()
		return rep, err
	}
	rep.Open = l.Recovery()
	err = l.recoverAll(&rep, ro)
	return rep, errors.Join(err, l.Close())
}

// renameMisnamed renames every segment whose first record verifies but
// names another base back to that base, when no file has that name and the
// segment keeps its place among its neighbours. It returns what it did; a
// segment it cannot rename is left for Open to report.
func renameMisnamed(dir string) ([]string, error) {
	bases, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	var done []string
	for i, base := range bases {
		id, ok := firstRecordID(filepath.Join(dir, segment.Name(base, segment.LogSuffix)))
		if !ok || id == base {
			continue
		}
		if i > 0 && id <= bases[i-1] || i+1 < len(bases) && id >= bases[i+1] {
			continue
		}
		from := filepath.Join(dir, segment.Name(base, segment.LogSuffix))
		to := filepath.Join(dir, segment.Name(id, segment.LogSuffix))
		if _, err := os.Stat(to); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		// Index files are caches: those of either name are stale now.
		removeSegmentFiles(dir, id)
		for _, suffix := range []string{segment.TimeIndexSuffix, segment.IndexSuffix} {
			_ = os.Remove(filepath.Join(dir, segment.Name(base, suffix)))
		}
		if err := os.Rename(from, to); err != nil {
			return done, fmt.Errorf("pagelog: rename %s: %w", from, err)
		}
		bases[i] = id
		done = append(done, fmt.Sprintf("%s renamed to %s: its first record is offset %d",
			segment.Name(base, segment.LogSuffix), segment.Name(id, segment.LogSuffix), id))
	}
	if len(done) > 0 {
		return done, syncDir(dir)
	}
	return nil, nil
}

// firstRecordID returns the id of the first record of a segment file, if
// it verifies.
func firstRecordID(path string) (uint64, bool) {
	f, err := regfile.Open(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var h [record.HeaderSize]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return 0, false
	}
	length, _, _, _, _ := record.Header(h[:])
	if length < record.MinLength {
		return 0, false
	}
	b := make([]byte, int(length)+4)
	if _, err := f.ReadAt(b, 0); err != nil {
		return 0, false
	}
	v, err := record.Decode(b, record.LengthMask)
	return v.ID, err == nil
}

func (l *Log) recoverAll(rep *RecoverReport, ro RecoverOptions) error {
	l.mu.Lock()
	segs := *l.segs.Load()
	for _, s := range segs {
		if len(s.VerifyIndex()) > 0 || !s.IndexMatchesRule() {
			s.RebuildIndex()
			rep.IndexesRewritten = append(rep.IndexesRewritten, segment.Name(s.Base(), segment.LogSuffix))
		}
	}
	l.mu.Unlock()
	v, err := l.Verify(nil)
	if err != nil {
		return err
	}
	rep.Damage = v.FirstDamage
	if ro.TruncateAtDamage && v.FirstDamage != nil {
		at := v.FirstDamage.Offset
		if err := l.Truncate(at); err != nil {
			return err
		}
		rep.TruncatedAt = &at
		if v, err = l.Verify(nil); err != nil {
			return err
		}
	}
	rep.After = v
	return nil
}
