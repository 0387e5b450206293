package record

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// TestDecodeRejectsEmptySection: the checksum does not cover the length
// field, so a flipped attributes flag is caught only by what follows it. A
// writer never sets the flag without attributes, so an empty section with
// the flag set is damage, not a record.
func TestDecodeRejectsEmptySection(t *testing.T) {
	body := []byte{0, 0, 'x', 'y'} // begins with two zero bytes
	rec := Append(nil, 7, nil, body)
	if _, err := Decode(rec, 0); err != nil {
		t.Fatalf("good record: %v", err)
	}
	flipped := append([]byte(nil), rec...)
	binary.BigEndian.PutUint32(flipped, binary.BigEndian.Uint32(flipped)|AttrFlag)
	if crc32.Checksum(flipped[8:], Table) != binary.BigEndian.Uint32(flipped[4:]) {
		t.Fatal("the flag is not covered by the checksum, so the checksum must still match")
	}
	if _, err := Decode(flipped, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flag set over an empty section: err = %v, want ErrCorrupt", err)
	}
}
