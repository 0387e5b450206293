package bench

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/internal/stopwatch"
)

// writerEnv makes the benchmark binary a writer process (see runWriter).
const writerEnv = "PAGELOG_BENCH_WRITER_DIR"

// runWriter appends 1 KiB records to the log in dir, in 1 MiB segments (a
// roll every thousand records), dropping old segments, until its stdin
// closes. It prints "ready" once it appends.
func runWriter(dir string) int {
	l, err := engine.Open(dir, engine.Options{SegmentBytes: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	body := make([]byte, 1024)
	fmt.Println("ready")
	for {
		select {
		case <-stop:
			_ = l.Close()
			return 0
		default:
		}
		for range 1000 {
			fill(body, l.Next())
			if _, err := l.Append(body); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		if next := l.Next(); next > 200_000 {
			_, _ = l.DropBefore(next - 200_000)
		}
	}
}

// BenchmarkReadBesideWriter reads recent 1 KiB records from a read-only
// Log (every one timed), alone and beside a writer process that appends
// 1 KiB records as fast as it can into 1 MiB segments (about a roll a
// millisecond) and drops old ones. The reader's view is the log as it was
// when it opened: its reads are of records the writer no longer touches,
// and their tail should not notice the writer beyond sharing two cores.
func BenchmarkReadBesideWriter(b *testing.B) {
	for _, writer := range []string{"none", "process"} {
		b.Run("writer="+writer, func(b *testing.B) {
			dir, err := os.MkdirTemp(scratch, "beside-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			l, err := engine.Open(dir, engine.Options{SegmentBytes: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 1024)
			for range 100_000 {
				fill(body, l.Next())
				if _, err := l.Append(body); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				b.Fatal(err)
			}
			if writer == "process" {
				stop := startWriter(b, dir)
				defer stop()
			}
			ro, err := engine.OpenReadOnly(dir, engine.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer ro.Close()
			next := ro.Next()
			offs := make([]uint64, 4096)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range offs {
				offs[i] = next - 1 - rng.Uint64N(1000)
			}
			lat := make(latencies, b.N)
			b.SetBytes(1024)
			b.ReportAllocs()
			b.ResetTimer()
			var sink byte
			for i := 0; i < b.N; i++ {
				t := stopwatch.Start()
				r, err := ro.Read(offs[i&4095])
				if err != nil {
					b.Fatal(err)
				}
				sink += r.Body[0]
				r.Release()
				lat[i] = t.Elapsed()
			}
			b.StopTimer()
			_ = sink
			lat.report(b)
		})
	}
}

// startWriter starts the writer process on dir and waits until it
// appends; stop ends it.
func startWriter(b *testing.B, dir string) (stop func()) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+dir)
	cmd.SysProcAttr = dieWithParent()
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("writer: %q %v %s", line, err, stderr.String())
	}
	time.Sleep(50 * time.Millisecond) // appending, rolling
	return func() {
		_ = in.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("writer: %v %s", err, stderr.String())
		}
	}
}
