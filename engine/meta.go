package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sync"

	"github.com/pagelog/pagelog/internal/checkpoint"
)

// log.meta: the settings that shape the files, stored with the log.
//
// On-disk format: never change, bump the version instead.
//
//	byte  size  field
//	0     1     version (1)
//	1     8     SegmentBytes
//	9     4     IndexIntervalBytes
//	13    4     MaxRecordBytes
//	17    8     first offset
//	25    4     CRC-32C of bytes 0..24
const (
	metaName    = "log.meta"
	metaVersion = 1
	metaSize    = 29
)

// meta is the content of log.meta.
type meta struct {
	SegmentBytes       int64
	IndexIntervalBytes int
	MaxRecordBytes     int
	FirstOffset        uint64
}

func defaultMeta() meta {
	return meta{
		SegmentBytes:       DefaultSegmentBytes,
		IndexIntervalBytes: DefaultIndexIntervalBytes,
		MaxRecordBytes:     DefaultMaxRecordBytes,
	}
}

func (m meta) encode() []byte {
	b := make([]byte, metaSize)
	b[0] = metaVersion
	binary.BigEndian.PutUint64(b[1:], uint64(m.SegmentBytes))
	binary.BigEndian.PutUint32(b[9:], uint32(m.IndexIntervalBytes))
	binary.BigEndian.PutUint32(b[13:], uint32(m.MaxRecordBytes))
	binary.BigEndian.PutUint64(b[17:], m.FirstOffset)
	return checkpoint.Seal(b)
}

func decodeMeta(b []byte) (meta, error) {
	if err := checkpoint.Check(b, metaSize, metaName, metaVersion); err != nil {
		return meta{}, err
	}
	m := meta{
		SegmentBytes:       int64(binary.BigEndian.Uint64(b[1:])),
		IndexIntervalBytes: intervalFromMeta(binary.BigEndian.Uint32(b[9:]), math.MaxInt),
		MaxRecordBytes:     int(binary.BigEndian.Uint32(b[13:])),
		FirstOffset:        binary.BigEndian.Uint64(b[17:]),
	}
	if m.SegmentBytes <= 0 || m.SegmentBytes > MaxSegmentBytes || m.MaxRecordBytes <= 0 || m.MaxRecordBytes > maxBodyLimit ||
		int64(m.IndexIntervalBytes) > maxIndexInterval || m.FirstOffset == maxOffset {
		return meta{}, &checkpoint.BadFileError{Name: metaName, Why: fmt.Sprintf("impossible settings %+v", m)}
	}
	return m, nil
}

// readMeta reads log.meta; ok is false when the file does not exist. A
// file that fails its checks gives a *checkpoint.BadFileError; one that a
// newer version wrote one matching ErrNewerFile, which no open goes past:
// its settings are another format's.
func readMeta(dir string) (m meta, ok bool, err error) {
	b, err := checkpoint.Read(dir, metaName)
	if errors.Is(err, fs.ErrNotExist) {
		return meta{}, false, nil
	}
	if errors.Is(err, checkpoint.ErrBadFile) {
		return meta{}, true, err
	}
	if err != nil {
		return meta{}, false, fmt.Errorf("pagelog: read %s: %w", metaName, err)
	}
	if err := checkpoint.Newer(b, metaName, metaVersion); err != nil {
		return meta{}, true, err
	}
	m, err = decodeMeta(b)
	return m, true, err
}

// replaceFile and syncDir: every checkpoint of the project is written the
// same way (internal/checkpoint).
func replaceFile(dir, name string, data []byte, mode os.FileMode) error {
	return checkpoint.Replace(dir, name, data, mode)
}

func syncDir(dir string) error {
	if h, ok := dirSyncHooks.Load(dir); ok {
		return syncDirWith(dir, h.(func(*os.File) error))
	}
	return checkpoint.SyncDir(dir)
}

// dirSyncHooks routes the directory syncs of a log to a test's datasync
// hook (Options.datasync), so that a simulated disk sees them beside the
// file syncs and can lose the entries no directory sync covered: keyed by
// the directory as given to Open, set by the test. Empty in production: one
// lookup per directory sync, which costs an fsync anyway.
var dirSyncHooks sync.Map

// syncDirWith is syncDir through a hook instead of fsync.
func syncDirWith(dir string, datasync func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("pagelog: sync directory: %w", err)
	}
	err = datasync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pagelog: sync directory %s: %w", dir, err)
	}
	return nil
}
