package testkit

import "math/rand/v2"

// TearStats counts what TearFile and Tear made of the files they tore.
type TearStats struct {
	SectorsNew  int // sectors that changed and reached the disk
	SectorsOld  int // sectors that changed and did not
	SectorsZero int // sectors never written back, read as zeros
	PagesTorn   int // pages some of whose sectors reached the disk
	FilesTorn   int // files with a changed sector that did not reach it
	Unsynced    int // files never synced
	Truncated   int // files whose change of size did not reach the disk
}

// TearFile returns what a power failure may leave of a file whose last
// synced content is synced (ok false: it was never synced, and may be
// nothing or zeros, space allocated and never written back) and whose
// content in the page cache is cur: Tear's mix of the two, at cur's size,
// or synced's when the change of size was not synced.
func TearFile(rng *rand.Rand, synced []byte, ok bool, cur []byte, st *TearStats) []byte {
	if !ok {
		st.Unsynced++
		if rng.IntN(2) == 0 {
			synced = make([]byte, len(cur)) // allocated, never written back
		}
	}
	out := Tear(rng, synced, cur, st)
	size := len(cur)
	if len(synced) != len(cur) && rng.IntN(3) == 0 {
		size = len(synced) // the size change was not synced
		st.Truncated++
	}
	if size <= len(out) {
		return out[:size]
	}
	return append(out, make([]byte, size-len(out))...)
}

// Tear mixes the synced content old with the page cache's content cur,
// 512-byte sector by sector, 4 KiB page by page: for each page that
// changed, all new, all old (zeros where nothing was synced), or torn
// (each sector new or old). Sometimes the whole file is new or old. The
// result is as long as the longer of the two.
func Tear(rng *rand.Rand, old, cur []byte, st *TearStats) []byte {
	const sector, page = 512, 4096
	n := max(len(old), len(cur))
	out := make([]byte, n)
	copy(out, old)
	newer := make([]byte, n)
	copy(newer, cur)
	whole := rng.IntN(4) // 0: all new, 1: all old, else page by page
	torn := false
	for p := 0; p < n; p += page {
		pe := min(p+page, n)
		if string(out[p:pe]) == string(newer[p:pe]) {
			continue
		}
		mode := whole
		if whole > 1 {
			mode = rng.IntN(4) // 0: new, 1 and 2: old, 3: torn
		}
		if mode == 3 {
			st.PagesTorn++
		}
		for s := p; s < pe; s += sector {
			se := min(s+sector, pe)
			if string(out[s:se]) == string(newer[s:se]) {
				continue
			}
			m := mode
			if m == 3 {
				m = rng.IntN(2)
			}
			switch {
			case m == 0:
				copy(out[s:se], newer[s:se])
				st.SectorsNew++
			case m == 2 && AllZero(out[s:se]):
				st.SectorsZero++ // nothing synced there: reads as zeros
				torn = true
			default:
				st.SectorsOld++
				torn = true
			}
		}
	}
	if torn {
		st.FilesTorn++
	}
	return out
}

// AllZero reports whether b holds only zero bytes.
func AllZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
