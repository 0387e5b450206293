package engine

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/internal/testkit"
)

// ---------------------------------------------------------------------------
// TestOptionsExtremeSettings.
//
// Every extreme setting is either refused at Open with an error matching
// ErrBadOptions whose message names the setting and its allowed range (and
// nothing is created), or works: appends and reads round-trip, offsets
// never repeat or wrap, Verify ends and is healthy, and so after a reopen
// with zero Options and a read-only open. Changing IndexIntervalBytes (or
// SegmentBytes) on reopen, after a clean or an unclean stop, leaves Verify
// healthy.

func TestOptionsExtremeSettings(t *testing.T) {
	root := t.TempDir() // on disk: some settings preallocate gigabytes
	type sc struct {
		name   string
		opts   Options
		refuse string // the setting's name, when Open must refuse it
	}
	withSync := func(d time.Duration) Options { return Options{Sync: SyncInterval, SyncInterval: d} }
	cases := []sc{
		{"SegmentBytes=1", Options{SegmentBytes: 1}, ""},
		{"SegmentBytes=16", Options{SegmentBytes: 16}, ""},
		{"SegmentBytes=17", Options{SegmentBytes: 17}, ""},
		{"SegmentBytes=MaxSegmentBytes", Options{SegmentBytes: maxSegmentBytesHere}, ""},
		{"SegmentBytes=MaxSegmentBytes+1", Options{SegmentBytes: maxSegmentBytesHere + 1}, "SegmentBytes"},
		{"SegmentBytes=-1", Options{SegmentBytes: -1}, "SegmentBytes"},
		{"SegmentBytes=MinInt64", Options{SegmentBytes: math.MinInt64}, "SegmentBytes"},
		{"IndexIntervalBytes=0", Options{IndexIntervalBytes: 0}, ""},
		// With the default 64 MiB segments an interval of 1 byte preallocates
		// 80 MiB of index files, which Verify reads whole: 3 s under -race.
		{"IndexIntervalBytes=1", Options{IndexIntervalBytes: 1, SegmentBytes: 1 << 20}, ""},
		{"IndexIntervalBytes=1<<32-1", Options{IndexIntervalBytes: maxIntervalHere}, ""},
		{"IndexIntervalBytes=1<<32", Options{IndexIntervalBytes: intervalOverLimit()}, "IndexIntervalBytes"},
		{"IndexIntervalBytes=-1", Options{IndexIntervalBytes: -1}, "IndexIntervalBytes"},
		{"MaxRecordBytes=1", Options{MaxRecordBytes: 1}, ""},
		{"MaxRecordBytes=max", Options{MaxRecordBytes: maxRecordBytesHere}, ""},
		{"MaxRecordBytes=max+1", Options{MaxRecordBytes: maxRecordBytesHere + 1}, "MaxRecordBytes"},
		{"MaxRecordBytes=-1", Options{MaxRecordBytes: -1}, "MaxRecordBytes"},
		{"FirstOffset=0", Options{FirstOffset: 0}, ""},
		{"FirstOffset=1<<63", Options{FirstOffset: 1 << 63}, ""},
		{"FirstOffset=MaxUint64-2", Options{FirstOffset: math.MaxUint64 - 2}, ""},
		{"FirstOffset=MaxUint64-1", Options{FirstOffset: math.MaxUint64 - 1}, ""},
		{"FirstOffset=MaxUint64", Options{FirstOffset: math.MaxUint64}, "FirstOffset"},
		{"FirstOffset=MaxUint64-2,SegmentBytes=1", Options{FirstOffset: math.MaxUint64 - 2, SegmentBytes: 1}, ""},
		{"SyncInterval=-1ns", withSync(-1), "SyncInterval"},
		{"SyncInterval=1ns", withSync(1), ""},
		{"Sync=7", Options{Sync: 7}, "sync policy"},
		{"Sync=-1", Options{Sync: -1}, "sync policy"},
		{"FileMode=setuid|0600", Options{FileMode: os.ModeSetuid | 0o600}, "FileMode"},
		{"FileMode=ModeDir|0600", Options{FileMode: os.ModeDir | 0o600}, "FileMode"},
		{"FileMode=ModeSticky", Options{FileMode: os.ModeSticky}, "FileMode"},
		{"DirMode=ModeSetgid|0700", Options{DirMode: os.ModeSetgid | 0o700}, "DirMode"},
	}
	rangeRE := regexp.MustCompile(`\[[^\]]*,[^\]]*\]`)
	for i, c := range cases {
		dir := filepath.Join(root, fmt.Sprintf("%02d", i), "log") // not created yet
		cs := time.Now()
		fails := runGuardedCase(60*time.Second, func(f *caseFailures) {
			if c.refuse != "" {
				settingRefused(f, dir, c.opts, c.refuse, rangeRE)
				return
			}
			settingWorks(f, dir, c.opts)
		})
		if os.Getenv("PAGELOG_CASE_TIMING") != "" {
			t.Logf("TIMING %v %s", time.Since(cs).Round(time.Millisecond), c.name)
		}
		for _, m := range fails {
			t.Errorf("%s: %s", c.name, m)
		}
	}
	scratch := caseScratchRoot(t)
	for _, unclean := range []bool{false, true} {
		name := "clean"
		if unclean {
			name = "unclean"
		}
		fails := runGuardedCase(60*time.Second, func(f *caseFailures) {
			cs := time.Now()
			changeSettingsOnReopen(f, filepath.Join(scratch, "change-"+name), unclean)
			if os.Getenv("PAGELOG_CASE_TIMING") != "" {
				t.Logf("TIMING %v change %s", time.Since(cs).Round(time.Millisecond), name)
			}
		})
		for _, m := range fails {
			t.Errorf("settings changed on reopen after a %s stop: %s", name, m)
		}
	}
}

func settingRefused(f *caseFailures, dir string, opts Options, name string, rangeRE *regexp.Regexp) {
	l, err := Open(dir, opts)
	if err == nil {
		f.add("Open accepted it (Next %d)", l.Next())
		_ = l.Close()
		return
	}
	if !errors.Is(err, ErrBadOptions) {
		f.add("Open: %v, want an error matching ErrBadOptions", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, name) {
		f.add("Open: the message %q does not name %s", msg, name)
	}
	isMode := strings.HasSuffix(name, "Mode")
	if !rangeRE.MatchString(msg) && !(isMode && strings.Contains(msg, "permission")) && !strings.Contains(msg, "want ") {
		f.add("Open: the message %q does not give the allowed range", msg)
	}
	if _, err := os.Stat(filepath.Dir(dir)); err == nil {
		f.add("Open refused the options but created %s", filepath.Dir(dir))
	}
	// The other entry points refuse them too.
	if l, err := OpenReadOnly(dir, opts); !errors.Is(err, ErrBadOptions) {
		f.add("OpenReadOnly: %v, want ErrBadOptions", err)
		if err == nil {
			_ = l.Close()
		}
	}
	if _, err := Recover(dir, opts, RecoverOptions{}); !errors.Is(err, ErrBadOptions) {
		f.add("Recover: %v, want ErrBadOptions", err)
	}
}

// settingWorks appends, reads, verifies, reopens and reads again.
func settingWorks(f *caseFailures, dir string, opts Options) {
	l, err := Open(dir, opts)
	if is32bit == 1 && errors.Is(err, ErrAddressSpace) {
		// A 32-bit process (or an emulator's) may have no room for the
		// largest segment's two mappings: a clear error is the promise.
		return
	}
	if err != nil {
		f.add("Open: %v (want it to work, or an error matching ErrAddressSpace in a 32-bit process)", err)
		return
	}
	maxBody := l.MaxRecordBytes()
	if opts.MaxRecordBytes > 0 && maxBody != opts.MaxRecordBytes {
		f.add("MaxRecordBytes() = %d, want %d", maxBody, opts.MaxRecordBytes)
	}
	first := l.Next()
	if first != opts.FirstOffset {
		f.add("a new log starts at %d, want FirstOffset %d", first, opts.FirstOffset)
	}
	bodies := map[uint64][]byte{}
	var offs []uint64
	full := false
	appendSome := func(l *Log, n int) {
		for i := range n {
			size := []int{0, 1, 2, 17, 100, 1000, 5000}[i%7]
			size = min(size, maxBody)
			want := l.Next()
			body := testBody(want, size)
			off, err := l.Append(body)
			if errors.Is(err, ErrFull) {
				full = true
				if l.Next() != want {
					f.add("Append: ErrFull moved Next from %d to %d", want, l.Next())
				}
				if want < math.MaxUint64-1 {
					f.add("Append: ErrFull at Next %d, far from the end of the offsets", want)
				}
				return
			}
			if err != nil {
				f.add("Append(%d bytes) at Next %d: %v", len(body), want, err)
				return
			}
			if off != want || (len(offs) > 0 && off <= offs[len(offs)-1]) {
				f.add("Append returned offset %d, want %d (after %v)", off, want, offs[max(0, len(offs)-3):])
				return
			}
			if _, dup := bodies[off]; dup {
				f.add("offset %d handed out twice", off)
			}
			bodies[off], offs = body, append(offs, off)
		}
	}
	check := func(who string, l *Log) {
		for _, off := range offs {
			r, err := l.Read(off)
			if err != nil {
				f.add("%s: Read(%d): %v", who, off, err)
				continue
			}
			if !bytes.Equal(r.Body, bodies[off]) {
				f.add("%s: Read(%d): not the record appended", who, off)
			}
			r.Release()
		}
		i, n := 0, 0
		for r, err := range l.Records(first) {
			if n++; n > len(offs)+10 {
				f.add("%s: Records yields more than the %d records appended", who, len(offs))
				break
			}
			if err != nil {
				f.add("%s: Records: %v", who, err)
				continue
			}
			if i >= len(offs) || r.Offset != offs[i] || !bytes.Equal(r.Body, bodies[r.Offset]) {
				f.add("%s: Records yielded offset %d, want %v", who, r.Offset, offs[min(i, len(offs)-1)])
				break
			}
			i++
		}
		if i != len(offs) {
			f.add("%s: Records yielded %d of %d records", who, i, len(offs))
		}
		n = 0
		for range l.Inspect(first) {
			if n++; n > len(offs)+10 {
				f.add("%s: Inspect yields more than the %d records appended", who, len(offs))
				break
			}
		}
		rep, err := l.Verify(nil)
		if err != nil || !rep.Healthy() || rep.Records != uint64(len(offs)) {
			f.add("%s: Verify: %v, %d records verified of %d, damaged %d missing %d problems %q index problems %q",
				who, err, rep.Records, len(offs), rep.Damaged, rep.Missing, firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
		}
	}
	appendSome(l, 12)
	if maxBody < 1<<20 {
		if _, err := l.Append(make([]byte, maxBody+1)); !errors.Is(err, ErrTooLarge) && !full {
			f.add("Append of MaxRecordBytes+1 bytes: %v, want ErrTooLarge", err)
		}
	}
	check("first open", l)
	if err := l.Close(); err != nil {
		f.add("Close: %v", err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		f.add("reopen with zero Options: %v", err)
		return
	}
	if want := first + uint64(len(offs)); l.Next() != want {
		f.add("reopen: Next %d, want %d", l.Next(), want)
	}
	check("reopen", l)
	appendSome(l, 5)
	check("reopen, appended", l)
	if err := l.Close(); err != nil {
		f.add("Close after reopen: %v", err)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		f.add("OpenReadOnly: %v", err)
		return
	}
	check("read-only", ro)
	_ = ro.Close()
}

// changeSettingsOnReopen writes a log, stops (cleanly or by copying the
// directory while it is open) and reopens it with other IndexIntervalBytes
// and SegmentBytes, appending each time; Verify must stay healthy.
func changeSettingsOnReopen(f *caseFailures, dir string, unclean bool) {
	l, err := Open(dir, Options{SegmentBytes: 8192, IndexIntervalBytes: 256})
	if err != nil {
		f.add("Open: %v", err)
		return
	}
	var sizes []int
	add := func(l *Log, n int) {
		for range n {
			off := l.Next()
			body := testBody(off, mixedSize(off))
			if got, err := l.Append(body); err != nil || got != off {
				f.add("Append: %d, %v; want %d", got, err, off)
				return
			}
			sizes = append(sizes, len(body))
		}
	}
	add(l, 150)
	for _, o := range []Options{
		{IndexIntervalBytes: 4096},
		{IndexIntervalBytes: 1},
		{IndexIntervalBytes: maxIntervalHere},
		{IndexIntervalBytes: 300, SegmentBytes: 1},
		{SegmentBytes: 64 << 10},
		{},
	} {
		if unclean {
			copied := dir + "-copy"
			_ = os.RemoveAll(copied)
			// The writer is open: kill -9 at a moment its background
			// work (a preparer, a roll naming its index files) leaves
			// the files as they stand.
			var cerr error
			if !whenQuiet(l, func() { cerr = testkit.CopyDir(dir, copied, false) }) {
				f.add("copy: the log's background work never went quiet")
				return
			}
			if cerr != nil {
				f.add("copy: %v", cerr)
				return
			}
			_ = l.Close()
			_ = os.RemoveAll(dir)
			if err := os.Rename(copied, dir); err != nil {
				f.add("rename: %v", err)
				return
			}
		} else if err := l.Close(); err != nil {
			f.add("Close: %v", err)
		}
		who := fmt.Sprintf("reopened with %+v", settingsString(o))
		if l, err = Open(dir, o); err != nil {
			f.add("%s: Open: %v", who, err)
			return
		}
		check := func(what string, l *Log) {
			for off, n := range sizes {
				r, err := l.Read(uint64(off))
				if err != nil || !bytes.Equal(r.Body, testBody(uint64(off), n)) {
					f.add("%s: %s: Read(%d): %v", who, what, off, err)
					return
				}
				r.Release()
			}
			if rep, err := l.Verify(nil); err != nil || !rep.Healthy() {
				f.add("%s: %s: Verify: %v, damaged %d missing %d problems %q index problems %q", who, what, err,
					rep.Damaged, rep.Missing, firstThreeAndCount(rep.Problems), firstThreeAndCount(rep.IndexProblems))
			}
		}
		check("before appending", l)
		add(l, 40)
		check("after appending", l)
		if ro, err := OpenReadOnly(dir, Options{}); err != nil {
			f.add("%s: OpenReadOnly: %v", who, err)
		} else {
			check("read-only beside it", ro)
			_ = ro.Close()
		}
	}
	_ = l.Close()
}

// settingsString prints the non-zero settings of o.
func settingsString(o Options) string {
	var p []string
	if o.SegmentBytes != 0 {
		p = append(p, fmt.Sprintf("SegmentBytes:%d", o.SegmentBytes))
	}
	if o.IndexIntervalBytes != 0 {
		p = append(p, fmt.Sprintf("IndexIntervalBytes:%d", o.IndexIntervalBytes))
	}
	return "{" + strings.Join(p, " ") + "}"
}
