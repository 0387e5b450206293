package segment

import (
	"errors"
	"io"
	"os"
)

// A source gives a walk the bytes of a segment's .log file.
//
// Two kinds exist, and which one a walk uses is the rule that keeps a reader
// from ever touching a mapped byte past the end of a file:
//
//   - mapSource reads the mapping. The writer uses it (it is the only one
//     who changes the file), and so does every reader below an end it has
//     verified: a writer never shrinks a .log file below the end of its whole
//     records, so those bytes stay inside the file for as long as the
//     mapping lives.
//   - fileSource reads the file with pread. Readers use it for every byte at
//     or past the end they have verified: another process may be appending
//     there, or trimming the file as it seals the segment, and a mapped
//     byte past the file's end raises SIGBUS where pread returns short.
type source interface {
	// at returns up to n bytes from pos: fewer at the end of the data, none
	// at or past it. The slice is valid until the next call.
	at(pos int64, n int) []byte
	// size returns how many bytes the source holds (for a file, its size
	// when last read).
	size() int64
}

// mapSource reads a mapping (or any byte slice).
type mapSource []byte

func (m mapSource) at(pos int64, n int) []byte {
	if pos < 0 || pos >= int64(len(m)) || n <= 0 {
		return nil
	}
	return m[pos:min(pos+int64(n), int64(len(m)))]
}

func (m mapSource) size() int64 { return int64(len(m)) }

// fileSource reads a file with pread through a window of recent bytes, so
// that a walk over many small records costs one read per window.
type fileSource struct {
	f     *os.File
	buf   []byte
	start int64 // file position of buf[0]
	n     int   // valid bytes in buf
	eof   int64 // file size seen at the last short read (-1: not seen)
	err   error // the first read error other than EOF

	// window, when set, is the size of the next read: it doubles with
	// every read up to fileWindow (a follower reads one small record
	// cheaply, and a long walk still in large reads).
	window int
}

// fileWindow is how much a fileSource reads at a time.
const fileWindow = 64 << 10

func newFileSource(f *os.File) *fileSource {
	return &fileSource{f: f, eof: -1}
}

func (s *fileSource) at(pos int64, n int) []byte {
	if pos < 0 || n <= 0 {
		return nil
	}
	if pos >= s.start && pos+int64(n) <= s.start+int64(s.n) {
		return s.buf[pos-s.start : pos-s.start+int64(n)]
	}
	want := max(n, fileWindow)
	if s.window > 0 {
		want = max(n, s.window)
		s.window = min(2*s.window, fileWindow)
	}
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:want]
	got, err := s.f.ReadAt(s.buf, pos)
	s.start, s.n = pos, got
	if err != nil {
		if errors.Is(err, io.EOF) {
			s.eof = pos + int64(got)
		} else if s.err == nil {
			s.err = err
		}
	}
	return s.buf[:min(n, got)]
}

func (s *fileSource) size() int64 {
	if st, err := s.f.Stat(); err == nil {
		return st.Size()
	}
	return 0
}

// forget drops the window, so that the next read sees the file as it is
// now (another process may have written it since).
func (s *fileSource) forget() { s.n = 0 }

// allZeroAt reports whether the n bytes of src from pos (fewer at its end)
// are all zero.
func allZeroAt(src source, pos int64, n int64) bool {
	for n > 0 {
		b := src.at(pos, int(min(n, fileWindow)))
		if len(b) == 0 {
			return true
		}
		if !allZero(b) {
			return false
		}
		pos += int64(len(b))
		n -= int64(len(b))
	}
	return true
}
