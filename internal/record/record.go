package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Table is the CRC-32C (Castagnoli) table every pagelog checksum uses.
var Table = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrEnd is returned, unwrapped, by Decode when the length field is 0:
	// the zero-filled tail of a preallocated file, not a record.
	ErrEnd = errors.New("pagelog: end of records")

	// ErrCorrupt is wrapped (with detail) by every error that reports
	// damaged bytes. Test with errors.Is.
	ErrCorrupt = errors.New("pagelog: corrupt record")

	// ErrTooLarge is returned by Encode when the record would not fit the
	// 31 bits of the length field.
	ErrTooLarge = errors.New("pagelog: record too large")
)

// Pre-made errors, so that the error paths of a scan do not allocate.
var (
	errNoLength = fmt.Errorf("%w: fewer than 4 bytes, no length field", ErrCorrupt)
	errChecksum = fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	errNoSecLen = fmt.Errorf("%w: attribute flag set but no room for the section length", ErrCorrupt)
	errSecPast  = fmt.Errorf("%w: attributes section runs past the record", ErrCorrupt)
	errSecEmpty = fmt.Errorf("%w: attribute flag set on an empty section", ErrCorrupt)
)

// Size returns the whole encoded size of a record (header + attributes
// section + body). a may be nil.
func Size(bodyLen int, a *Attrs) int {
	return HeaderSize + a.SectionSize() + bodyLen
}

// MaxLength returns the length-field value of a record with a body of
// maxBody bytes and the largest attributes section a writer produces
// (MaxSectionSize), so that a reader bounding lengths by MaxLength(maxBody)
// accepts every record a writer with that body limit can write. The result
// is clamped to LengthMask; a negative maxBody counts as 0.
func MaxLength(maxBody int) uint32 {
	if maxBody < 0 {
		maxBody = 0
	}
	n := uint64(MinLength) + MaxSectionSize + uint64(maxBody)
	if n > LengthMask {
		return LengthMask
	}
	return uint32(n)
}

// Encode writes a whole record into dst[:Size(len(body), a)] and returns its
// size. a may be nil. It returns io.ErrShortBuffer when dst is too small, an
// error wrapping ErrInvalidAttrs when a is invalid, and ErrTooLarge when the
// length does not fit 31 bits; dst is untouched on error. body may alias
// dst at the body's final position. Encode does not allocate.
func Encode(dst []byte, id uint64, a *Attrs, body []byte) (int, error) {
	if err := a.Validate(); err != nil {
		return 0, err
	}
	sec := a.SectionSize()
	n := HeaderSize + sec + len(body)
	if uint64(n-4) > LengthMask {
		return 0, ErrTooLarge
	}
	if len(dst) < n {
		return 0, io.ErrShortBuffer
	}
	rec := dst[:n]
	length := uint32(n - 4)
	if sec > 0 {
		length |= AttrFlag
	}
	copy(rec[HeaderSize+sec:], body)
	binary.BigEndian.PutUint32(rec[lengthOff:], length)
	binary.BigEndian.PutUint64(rec[idOff:], id)
	if sec > 0 {
		putSection(rec[HeaderSize:HeaderSize+sec], a)
	}
	binary.BigEndian.PutUint32(rec[checksumOff:], crc32.Checksum(rec[idOff:], Table))
	return n, nil
}

// EncodeSized is Encode into rec of exactly Size(len(body), a) bytes, for
// a writer that has sized the record: the attributes section's size is
// what rec leaves beside the header and the body, not worked out again.
func EncodeSized(rec []byte, id uint64, a *Attrs, body []byte) (int, error) {
	if err := a.Validate(); err != nil {
		return 0, err
	}
	sec := len(rec) - HeaderSize - len(body)
	if sec < 0 || sec > 0 && a == nil {
		return 0, io.ErrShortBuffer
	}
	if uint64(len(rec)-4) > LengthMask {
		return 0, ErrTooLarge
	}
	length := uint32(len(rec) - 4)
	if sec > 0 {
		length |= AttrFlag
		putSection(rec[HeaderSize:HeaderSize+sec], a)
	}
	copy(rec[HeaderSize+sec:], body)
	binary.BigEndian.PutUint32(rec[lengthOff:], length)
	binary.BigEndian.PutUint64(rec[idOff:], id)
	binary.BigEndian.PutUint32(rec[checksumOff:], crc32.Checksum(rec[idOff:], Table))
	return len(rec), nil
}

// Append appends an encoded record to dst and returns the extended slice.
// It is a convenience for tests and tools; it panics where Encode would
// return an error (invalid attributes, record too large).
func Append(dst []byte, id uint64, a *Attrs, body []byte) []byte {
	n := Size(len(body), a)
	dst = slices.Grow(dst, n)
	start := len(dst)
	if _, err := Encode(dst[start:start+n], id, a, body); err != nil {
		panic("record.Append: " + err.Error())
	}
	return dst[:start+n]
}

// Header reads the 16-byte header without verifying anything beyond bounds.
// It returns the length field with AttrFlag cleared, whether AttrFlag was
// set, the stored checksum and the id; ok is false if len(buf) < HeaderSize.
func Header(buf []byte) (length uint32, hasAttrs bool, checksum uint32, id uint64, ok bool) {
	if len(buf) < HeaderSize {
		return 0, false, 0, 0, false
	}
	raw := binary.BigEndian.Uint32(buf[lengthOff:])
	return raw & LengthMask, raw&AttrFlag != 0,
		binary.BigEndian.Uint32(buf[checksumOff:]),
		binary.BigEndian.Uint64(buf[idOff:]), true
}

// View is a decoded record whose slices point into the decoded buffer (zero
// copy). Section and Body have their capacity capped at their length, so
// appending to them never overwrites the buffer.
type View struct {
	ID       uint64
	Size     int    // whole record bytes: 4 + length
	Checksum uint32 // stored (and verified) checksum
	Section  []byte // raw attributes section incl. its 2-byte length; nil when absent
	Body     []byte
}

// Attrs parses v.Section; a record without a section gives empty Attrs.
// Group and Dedup alias the decoded buffer.
func (v *View) Attrs() (Attrs, error) {
	if v.Section == nil {
		return Attrs{}, nil
	}
	return ParseSection(v.Section)
}

// Decode verifies and decodes the record at the start of buf.
//
//	length field 0                       ErrEnd (the plain sentinel)
//	len(buf) < 4                         wraps ErrCorrupt
//	length < MinLength, past len(buf),
//	or > maxLength                       wraps ErrCorrupt ("length N out of range")
//	checksum mismatch                    wraps ErrCorrupt
//	attribute flag set, section damaged  wraps ErrCorrupt
//
// maxLength is the largest allowed value of the length field (see
// MaxLength); 0 means LengthMask. Decode does not compare the id with an
// expectation: the caller must check View.ID. It does not allocate except
// to describe an out-of-range length.
func Decode(buf []byte, maxLength uint32) (View, error) {
	if len(buf) < 4 {
		return View{}, errNoLength
	}
	raw := binary.BigEndian.Uint32(buf[lengthOff:])
	if raw == 0 {
		return View{}, ErrEnd
	}
	length := raw & LengthMask
	if maxLength == 0 || maxLength > LengthMask {
		maxLength = LengthMask
	}
	if length < MinLength || length > maxLength || uint64(length)+4 > uint64(len(buf)) {
		return View{}, lengthError(length, maxLength, len(buf))
	}
	n := int(length) + 4
	rec := buf[:n:n]
	sum := binary.BigEndian.Uint32(rec[checksumOff:])
	if crc32.Checksum(rec[idOff:], Table) != sum {
		return View{}, errChecksum
	}
	v := View{
		ID:       binary.BigEndian.Uint64(rec[idOff:]),
		Size:     n,
		Checksum: sum,
		Body:     rec[HeaderSize:],
	}
	if raw&AttrFlag != 0 {
		rest := rec[HeaderSize:]
		if len(rest) < SectionLenSize {
			return View{}, errNoSecLen
		}
		end := SectionLenSize + int(binary.BigEndian.Uint16(rest))
		if end > len(rest) {
			return View{}, errSecPast
		}
		if end == SectionLenSize {
			// Writers never set the flag without attributes; an empty
			// section means the flag (which the checksum does not cover)
			// was flipped.
			return View{}, errSecEmpty
		}
		v.Section = rest[:end:end]
		if err := checkSection(v.Section); err != nil {
			return View{}, err
		}
		v.Body = rest[end:]
	}
	return v, nil
}

// lengthError describes an out-of-range length field. It is kept out of
// Decode so that the formatting does not weigh on the good path.
//
//go:noinline
func lengthError(length, maxLength uint32, avail int) error {
	return fmt.Errorf("%w: length %d out of range (min %d, max %d, %d bytes in buffer)",
		ErrCorrupt, length, MinLength, maxLength, avail)
}
