// Package mmapfile is the thin layer between pagelog and the kernel's
// memory-mapping calls: mmap, munmap, msync of a range, madvise, a page
// toucher that takes write faults off the append path (Populate),
// fallocate and fdatasync. It holds no state and knows nothing of the log
// format. Mappings at fixed addresses, which a caller's stale slices may
// still reference, live in internal/addrspace, not here.
//
// Platform code lives in files named _linux.go and _unix.go so that a port to
// another system (Windows, where github.com/edsrzf/mmap-go would serve) only
// adds files beside them.
//
// A mapping returned by Map is a []byte that aliases the file's page-cache
// pages. Touching a byte past the end of the file (after the file was
// truncated under the mapping) raises SIGBUS, so callers must bound every
// access by the file's size, and must never Unmap while another goroutine
// may still read the slice.
package mmapfile
