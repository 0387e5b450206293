package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/testkit"
	"github.com/pagelog/pagelog/queue"
)

func TestVerifyHealthy(t *testing.T) {
	dir := t.TempDir()
	appendMessages(t, dir, messages("v", 200), "--segment-bytes", "1000")
	r := mustRun(t, "", "verify", "--dir", dir)
	for _, want := range []string{"records: 200 verified, 0 damaged", "healthy\n", "segments: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "damaged:") {
		t.Errorf("healthy report names damage:\n%s", r.stdout)
	}
}

func TestVerifyDamagedSealedSegment(t *testing.T) {
	dir := t.TempDir()
	msgs := messages("sealed", 200)
	appendMessages(t, dir, msgs, "--segment-bytes", "1000")
	infos := parseDumpText(t, mustRun(t, "", "dump", "--dir", dir).stdout)
	const victim = 3 // in the first segment, which is sealed
	in := infos[victim]
	if in.Segment == infos[len(infos)-1].Segment {
		t.Fatal("the victim's segment is the active one")
	}
	path := filepath.Join(dir, in.Segment)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[in.Position+16] ^= 0x01 // the first body byte
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	r := runCmd(t, "", "verify", "--dir", dir)
	if r.code != 1 {
		t.Fatalf("verify of a damaged log: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	want := fmt.Sprintf("damaged: offset %d in segment %s at position %d: ", victim, in.Segment, in.Position)
	if !strings.Contains(r.stdout, want) {
		t.Fatalf("report lacks %q:\n%s", want, r.stdout)
	}
	if !strings.Contains(r.stdout, want+"checksum mismatch\n") {
		t.Errorf("the reason is not given once, plainly:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "199 verified, 1 damaged") {
		t.Errorf("report miscounts:\n%s", r.stdout)
	}

	// read refuses the damaged record and still serves its neighbours.
	rr := runCmd(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(victim))
	if rr.code != 1 || rr.stdout != "" {
		t.Fatalf("read of the damaged record: exit %d, stdout %q", rr.code, rr.stdout)
	}
	oneLine(t, "read stderr", rr.stderr)
	if got := mustRun(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(victim+1)).stdout; got != msgs[victim+1] {
		t.Fatalf("neighbour: got %q", got)
	}

	// dump lists it as not ok, and says why on stderr only.
	d := mustRun(t, "", "dump", "--dir", dir)
	after := parseDumpText(t, d.stdout)
	for _, a := range after {
		if a.OK != (a.Offset != victim) {
			t.Fatalf("dump: offset %d ok=%v", a.Offset, a.OK)
		}
	}
	oneLine(t, "dump stderr", d.stderr)
	if !strings.Contains(d.stderr, want) {
		t.Errorf("dump stderr %q does not name the offset", d.stderr)
	}
}

// TestReadOnlyCommandsChangeNothing runs read, dump and verify beside a
// writer in this process and checks that no file changed.
func TestReadOnlyCommandsChangeNothing(t *testing.T) {
	dir := t.TempDir()
	msgs := messages("ro", 150)
	appendMessages(t, dir, msgs, "--segment-bytes", "1200")
	l, err := engine.Open(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if off, err := l.Append([]byte("by the writer")); err != nil || off != 150 {
		t.Fatal(off, err)
	}
	msgs = append(msgs, "by the writer")

	// The writer's own background work (faulting pages in ahead, which
	// moves files' modification times) settles first: what is compared
	// is what the commands do.
	before := testkit.DirDigest(t, dir, testkit.HashOptions{Tree: true, ModTimes: true})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		now := testkit.DirDigest(t, dir, testkit.HashOptions{Tree: true, ModTimes: true})
		if now == before {
			break
		}
		before = now
	}
	for i := range msgs {
		if got := mustRun(t, "", "read", "--dir", dir, "--offset", strconv.Itoa(i)).stdout; got != msgs[i] {
			t.Fatalf("read %d: got %q, want %q", i, got, msgs[i])
		}
	}
	checkDump(t, dir, parseDumpText(t, mustRun(t, "", "dump", "--dir", dir).stdout), msgs, 0)
	checkDump(t, dir, parseDumpJSON(t, mustRun(t, "", "dump", "--dir", dir, "--json", "--from", "0").stdout), msgs, 0)
	v := mustRun(t, "", "verify", "--dir", dir)
	if !strings.Contains(v.stdout, "151 verified") {
		t.Fatalf("verify:\n%s", v.stdout)
	}
	if after := testkit.DirDigest(t, dir, testkit.HashOptions{Tree: true, ModTimes: true}); after != before {
		t.Fatal("read, dump or verify changed a file")
	}

	// The writer still works.
	if off, err := l.Append([]byte("later")); err != nil || off != 151 {
		t.Fatal(off, err)
	}
}

// TestVerifyQueueMissingSideSegmentIsNotHealthy removes the first segment
// of a queue's delete log, or of its receive-count log, whose records all
// name messages at or above the head: verify says the queue is not
// healthy and how many messages the loss may bring back, and queue stats
// counts it.
func TestVerifyQueueMissingSideSegmentIsNotHealthy(t *testing.T) {
	for _, side := range []struct{ sub, line, stat string }{
		{"deletes", "up to %d deleted messages may be handed out again", "deletes_lost"},
		{"receives", "up to %d more hand-outs", "receives_lost"},
	} {
		t.Run(side.sub, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			q, err := queue.Open(dir, queue.Options{Log: engine.Options{SegmentBytes: 4096}, MaxReceives: 100})
			if err != nil {
				t.Fatal(err)
			}
			bodies := make([][]byte, 1000)
			for i := range bodies {
				bodies[i] = fmt.Appendf(nil, "verify-%04d", i)
			}
			if _, err := q.SendBatch(bodies); err != nil {
				t.Fatal(err)
			}
			var offs []uint64
			for {
				m, ok, err := q.TryReceive()
				if err != nil || !ok {
					break
				}
				offs = append(offs, m.Offset)
			}
			if len(offs) != len(bodies) {
				t.Fatalf("received %d of %d", len(offs), len(bodies))
			}
			if err := q.DeleteBatch(offs[1:]); err != nil { // the first keeps the head at 0
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if r := runCmd(t, "", "verify", "--dir", dir); r.code != 0 {
				t.Fatalf("verify of the undamaged queue: exit %d\n%s", r.code, r.stdout)
			}

			sdir := filepath.Join(dir, side.sub)
			segs, _ := filepath.Glob(filepath.Join(sdir, "*.log"))
			if len(segs) < 2 {
				t.Fatalf("%s has %d segments", side.sub, len(segs))
			}
			l, err := engine.OpenReadOnly(sdir, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			lost := 0
			for ri := range l.Inspect(l.First()) {
				if filepath.Join(sdir, ri.Segment) == segs[0] {
					lost++
				}
			}
			l.Close()
			base := strings.TrimSuffix(segs[0], ".log")
			for _, suffix := range []string{".log", ".index", ".timeindex"} {
				os.Remove(base + suffix)
			}

			r := runCmd(t, "", "verify", "--dir", dir)
			if r.code != 1 || !strings.Contains(r.stdout, "queue NOT healthy") {
				t.Errorf("verify without the first %s segment: exit %d, want 1 and NOT healthy\n%s", side.sub, r.code, r.stdout)
			}
			if want := fmt.Sprintf(side.line, lost); !strings.Contains(r.stdout, want) {
				t.Errorf("verify does not say %q:\n%s", want, r.stdout)
			}
			s := mustRun(t, "", "queue", "stats", "--dir", dir)
			if want := fmt.Sprintf("%s %d\n", side.stat, lost); !strings.Contains(s.stdout, want) {
				t.Errorf("queue stats does not say %q:\n%s", want, s.stdout)
			}
		})
	}
}
