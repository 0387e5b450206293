package engine

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/pagelog/pagelog/internal/checkpoint"
)

// log.id: the log's identity, 16 random bytes drawn when the log is made,
// so that a cursor can tell its log from another one made later in the
// same directory (see the cursor's identity slot in cursor_files.go).
//
// On-disk format: never change, bump the version instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     16    identity (random)
//	17    4     CRC-32C of bytes 0..16
const (
	logIDName    = "log.id"
	logIDVersion = 1
	logIDSize    = 21
)

// logID is a log's identity.
type logID [16]byte

func (id logID) String() string { return hex.EncodeToString(id[:]) }

func decodeLogID(b []byte) (logID, error) {
	if err := checkpoint.Check(b, logIDSize, logIDName, logIDVersion); err != nil {
		return logID{}, err
	}
	return logID(b[1:17]), nil
}

// readLogID reads log.id: ok is false when there is none. A damaged file
// gives a *checkpoint.BadFileError, one that a newer version wrote an
// error matching ErrNewerFile, anything but a regular file ErrNotRegular.
func readLogID(dir string) (id logID, ok bool, err error) {
	b, err := checkpoint.Read(dir, logIDName)
	if errors.Is(err, fs.ErrNotExist) {
		return logID{}, false, nil
	}
	if err != nil {
		return logID{}, false, fmt.Errorf("pagelog: read %s: %w", logIDName, err)
	}
	if err := checkpoint.Newer(b, logIDName, logIDVersion); err != nil {
		return logID{}, false, err
	}
	id, err = decodeLogID(b)
	return id, err == nil, err
}

// ensureLogID gives a log opened for writing its identity: a new log, and
// a log made before identities (or whose log.id is missing or damaged),
// gets a new random one. A log.id that a newer version wrote is never
// replaced: the open fails.
func ensureLogID(dir string, mode os.FileMode, rep *Recovery, newLog bool) error {
	_, ok, err := readLogID(dir)
	var bad *checkpoint.BadFileError
	switch {
	case ok:
		return nil
	case errors.As(err, &bad) && !errors.Is(err, ErrNewerFile):
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s replaced (%s): the log's cursors start again at its first record", logIDName, bad.Why))
	case err != nil:
		return err
	case !newLog:
		rep.Notes = append(rep.Notes, logIDName+" written: the log had no identity")
	}
	b := make([]byte, logIDSize)
	b[0] = logIDVersion
	if _, err := rand.Read(b[1:17]); err != nil {
		return fmt.Errorf("pagelog: %s: %w", logIDName, err)
	}
	binary.BigEndian.PutUint32(b[17:], checkpoint.Sum(b[:17]))
	return replaceFile(dir, logIDName, b, mode)
}
