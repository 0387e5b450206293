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
	f, err := os.Create(filepath.Join(scratch, "limit-copy"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const size = 4 << 20
	if err := mmapfile.Allocate(f, 0, size); err != nil {
		b.Fatal(err)
	}
	m, err := mmapfile.Map(f, size, true)
	if err != nil {
		b.Fatal(err)
	}
	defer mmapfile.Unmap(m)
	for i := 0; i < size; i += 4096 {
		m[i] = 0 // fault every page in first
	}
	body := make([]byte, 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(m[(i*1024)%size:], body)
	}
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
