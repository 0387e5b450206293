package engine

import (
	"errors"

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
	IndexesRewritten []string     // segment files whose index files were rewritten
	Damage           *RecordInfo  // the first damaged record, if any
	TruncatedAt      *uint64      // where the log was cut, with TruncateAtDamage
	After            VerifyReport // a verify of the log as Recover leaves it
}

// Recover opens the log in dir for writing, which cuts a torn tail of the
// active segment, then rewrites every missing or damaged index and time
// index, and verifies every record. With TruncateAtDamage it also cuts the
// log at the first damaged record, the only way damage is ever cut.
func Recover(dir string, opts Options, ro RecoverOptions) (RecoverReport, error) {
	l, err := Open(dir, opts)
	if err != nil {
		return RecoverReport{}, err
	}
	rep := RecoverReport{Open: l.Recovery()}
	err = l.recoverAll(&rep, ro)
	return rep, errors.Join(err, l.Close())
}

func (l *Log) recoverAll(rep *RecoverReport, ro RecoverOptions) error {
	l.mu.Lock()
	segs := *l.segs.Load()
	for _, s := range segs {
		if len(s.VerifyIndex()) > 0 {
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
