package bench

import (
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/pagelog/pagelog/mmapfile"
)

// The machine's limits that pagelog's figures are compared with.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BenchmarkLimitCRC: CRC-32C of 1 KiB, what every append and read pays.
func BenchmarkLimitCRC(b *testing.B) {
	buf := make([]byte, 1024)
	b.SetBytes(1024)
	var sink uint32
	for i := 0; i < b.N; i++ {
		sink += crc32.Checksum(buf, castagnoli)
	}
	_ = sink
}

// BenchmarkLimitCopyMapped: copy 1 KiB into a resident page of a mapped
// file, the copy every append makes.
func BenchmarkLimitCopyMapped(b *testing.B) {
	m := residentMapping(b, "limit-copy")
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(m[(i*1024)%len(m):], body)
	}
}

// BenchmarkLimitCopyCRC: copy 1 KiB into a resident page of a mapped file
// and CRC-32C it there: the floor of an append, and what a verified Read
// of a 1 KiB record is held to (at most 3x; make bench-compare prints the
// ratio of the same run).
func BenchmarkLimitCopyCRC(b *testing.B) {
	m := residentMapping(b, "limit-copy-crc")
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	var sink uint32
	for i := 0; i < b.N; i++ {
		at := (i * 1024) % len(m)
		copy(m[at:], body)
		sink += crc32.Checksum(m[at:at+1024], castagnoli)
	}
	_ = sink
}

// residentMapping maps 4 MiB of a new scratch file, every page faulted in.
func residentMapping(b *testing.B, name string) []byte {
	b.Helper()
	f, err := os.Create(filepath.Join(scratch, name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		f.Close()
		os.Remove(f.Name())
	})
	const size = 4 << 20
	if err := mmapfile.Allocate(f, 0, size); err != nil {
		b.Fatal(err)
	}
	m, err := mmapfile.Map(f, size, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mmapfile.Unmap(m) })
	for i := 0; i < size; i += 4096 {
		m[i] = 0 // fault every page in first
	}
	return m
}

// BenchmarkLimitWrite: one write() system call of 1 KiB.
func BenchmarkLimitWrite(b *testing.B) {
	f, err := os.Create(filepath.Join(scratch, "limit-write"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	body := make([]byte, 1024)
	b.SetBytes(1024)
	for i := 0; i < b.N; i++ {
		if _, err := f.WriteAt(body, int64(i%65536)*1024); err != nil {
			b.Fatal(err)
		}
	}
}
