package engine

import (
	"encoding/binary"
	"errors"

	"github.com/pagelog/pagelog/internal/checkpoint"
	"github.com/pagelog/pagelog/internal/segment"
)

// Two small checkpoint files help Open walk less. Neither is ever trusted
// blindly: each has a version byte and a CRC-32C, and what it says is
// checked against the log.
//
// log.clean, written by a clean Close and removed by the next writable
// Open (on-disk format: never change, bump the version instead):
//
//	0   1  version (1)
//	1   8  base offset of the active segment
//	9   8  position of its last record (int64, -1 when empty)
//	17  8  end: bytes of records in the active segment
//	25  8  next offset
//	33  4  bytes appended since the last index entry
//	37  8  time of the newest time-index entry (Unix ms)
//	45  4  CRC-32C of bytes 0..44
//
// log.recovery, the recovery point, rewritten now and then after a sync:
//
//	0   1  version (1)
//	1   8  base offset of the active segment the point lies in
//	9   8  position: every byte of that segment below it was synced
//	17  8  next offset at that position
//	25  4  CRC-32C of bytes 0..24
const (
	cleanName     = "log.clean"
	cleanSize     = 49
	recoveryName  = "log.recovery"
	recoverySize  = 29
	checkpointVer = 1
)

type cleanMarker struct {
	Base  uint64
	State segment.CleanState
}

func (c cleanMarker) encode() []byte {
	b := make([]byte, cleanSize)
	b[0] = checkpointVer
	binary.BigEndian.PutUint64(b[1:], c.Base)
	binary.BigEndian.PutUint64(b[9:], uint64(c.State.LastPos))
	binary.BigEndian.PutUint64(b[17:], uint64(c.State.End))
	binary.BigEndian.PutUint64(b[25:], c.State.Next)
	binary.BigEndian.PutUint32(b[33:], uint32(c.State.SpacerCount))
	binary.BigEndian.PutUint64(b[37:], uint64(c.State.LastMs))
	return checkpoint.Seal(b)
}

func decodeClean(b []byte) (cleanMarker, error) {
	if err := checkpoint.Check(b, cleanSize, cleanName, checkpointVer); err != nil {
		return cleanMarker{}, err
	}
	return cleanMarker{
		Base: binary.BigEndian.Uint64(b[1:]),
		State: segment.CleanState{
			LastPos:     int64(binary.BigEndian.Uint64(b[9:])),
			End:         int64(binary.BigEndian.Uint64(b[17:])),
			Next:        binary.BigEndian.Uint64(b[25:]),
			SpacerCount: int(binary.BigEndian.Uint32(b[33:])),
			LastMs:      int64(binary.BigEndian.Uint64(b[37:])),
		},
	}, nil
}

type recoveryPoint struct {
	Base uint64
	Pos  int64
	Next uint64
}

func (r recoveryPoint) encode() []byte {
	b := make([]byte, recoverySize)
	b[0] = checkpointVer
	binary.BigEndian.PutUint64(b[1:], r.Base)
	binary.BigEndian.PutUint64(b[9:], uint64(r.Pos))
	binary.BigEndian.PutUint64(b[17:], r.Next)
	return checkpoint.Seal(b)
}

func decodeRecoveryPoint(b []byte) (recoveryPoint, error) {
	if err := checkpoint.Check(b, recoverySize, recoveryName, checkpointVer); err != nil {
		return recoveryPoint{}, err
	}
	return recoveryPoint{
		Base: binary.BigEndian.Uint64(b[1:]),
		Pos:  int64(binary.BigEndian.Uint64(b[9:])),
		Next: binary.BigEndian.Uint64(b[17:]),
	}, nil
}

// readHint gathers what the checkpoint files say about the active segment
// at base. A missing, damaged or stale file just gives no hint (and a note
// in the report); the walk then does the work. Read-only opens use the
// same hints as writable ones, so that both apply the same rules. Something
// other than a regular file at a checkpoint's name (a FIFO, a symbolic
// link), or a file a newer version wrote, is noted too, and returned as an
// error (ErrNotRegular, ErrNewerFile): a writable open, which would remove
// or replace the file, refuses it; a read-only one goes on without it.
func readHint(dir string, base uint64, rep *Recovery) (segment.Hint, error) {
	var h segment.Hint
	b, cerr := readCheckpoint(dir, cleanName, rep)
	if err := checkpoint.Newer(b, cleanName, checkpointVer); err != nil {
		rep.Notes = append(rep.Notes, "clean-close marker ignored: "+err.Error())
		cerr = err
	} else if b != nil {
		if c, err := decodeClean(b); err != nil {
			rep.Notes = append(rep.Notes, "clean-close marker ignored: "+err.Error())
		} else if c.Base == base {
			h.Clean = &c.State
		}
	}
	b, rerr := readCheckpoint(dir, recoveryName, rep)
	if err := checkpoint.Newer(b, recoveryName, checkpointVer); err != nil {
		rep.Notes = append(rep.Notes, "recovery point ignored: "+err.Error())
		rerr = err
	} else if b != nil {
		if r, err := decodeRecoveryPoint(b); err != nil {
			rep.Notes = append(rep.Notes, "recovery point ignored: "+err.Error())
		} else if r.Base == base && r.Pos > 0 {
			h.RecoveryPoint, h.RecoveryNext = r.Pos, r.Next
		}
	}
	return h, errors.Join(cerr, rerr)
}

// readCheckpoint reads the checkpoint file name of dir: nil when it does
// not exist or cannot be read. Something other than a regular file there
// is noted in rep and returned as an error (ErrNotRegular).
func readCheckpoint(dir, name string, rep *Recovery) ([]byte, error) {
	b, err := checkpoint.Read(dir, name)
	if errors.Is(err, ErrNotRegular) {
		if rep != nil {
			rep.Notes = append(rep.Notes, name+" ignored: "+err.Error())
		}
		return nil, err
	}
	if err != nil {
		return nil, nil
	}
	return b, nil
}

// checkpointNext returns the highest next offset that log.clean or
// log.recovery records (0 when neither holds one): a bound below which
// every offset was used, whatever the segments hold now.
func checkpointNext(dir string) uint64 {
	var next uint64
	if b, _ := readCheckpoint(dir, cleanName, nil); b != nil {
		if c, err := decodeClean(b); err == nil {
			next = max(next, c.State.Next)
		}
	}
	if b, _ := readCheckpoint(dir, recoveryName, nil); b != nil {
		if r, err := decodeRecoveryPoint(b); err == nil {
			next = max(next, r.Next)
		}
	}
	return next
}
