package main

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain makes the test binary a child when measure spawns it.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

var testConfig = config{spread: 50 * time.Millisecond, timeout: 2 * time.Minute}

// TestEverySystemFindsItsMessagesAfterAReopen runs every system of the
// build on a few queues, through the child processes: each makes every
// queue, sends and receives, and a fresh process finds as many messages as
// the first one left (measure compares the two).
func TestEverySystemFindsItsMessagesAfterAReopen(t *testing.T) {
	const n = 20
	for _, s := range selectSystems("") {
		t.Run(s.name, func(t *testing.T) {
			rw := measure(s, n, t.TempDir(), testConfig)
			if rw.Err != "" {
				t.Fatal(rw.Err)
			}
			c, o := rw.Create, rw.Reopen
			if c.Reached != n || o.Reached != n {
				t.Fatalf("made %d queues, touched %d, want %d", c.Reached, o.Reached, n)
			}
			if c.SendOps == 0 || (s.receive && c.RecvOps == 0) {
				t.Fatalf("%d sends, %d receives", c.SendOps, c.RecvOps)
			}
			if want := int64(n + c.SendOps - c.RecvOps); c.Messages != want {
				t.Fatalf("%d messages left, want %d", c.Messages, want)
			}
			if c.DiskBytes <= 0 {
				t.Fatalf("du %d bytes", c.DiskBytes)
			}
			if runtime.GOOS == "linux" && (c.Created.RSSBytes <= 0 || c.Created.FDs <= 0 || c.Created.Maps <= 0) {
				t.Fatalf("usage not read: %+v", c.Created)
			}
			if !strings.Contains(table([]row{rw}, testConfig.spread), "| "+s.name+" | 20 |") {
				t.Fatalf("table has no row for %s", s.name)
			}
		})
	}
}

// TestASystemOutOfDescriptorsIsARow caps the children's descriptors: the
// per-directory queues stop part of the way, and the row says where and why.
func TestASystemOutOfDescriptorsIsARow(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("descriptor counts come from /proc")
	}
	cfg := testConfig
	cfg.nofile = 64
	rw := measure(pagelogDirsSystem(), 50, t.TempDir(), cfg)
	if rw.Create == nil {
		t.Fatalf("no create result: %s", rw.Err)
	}
	if c := rw.Create; c.Reached == 0 || c.Reached >= 50 || c.NoFileSoft != 64 {
		t.Fatalf("reached %d of 50 queues with %d descriptors", c.Reached, c.NoFileSoft)
	}
	if !strings.Contains(rw.Err, "too many open files") || rw.Reopen != nil {
		t.Fatalf("error %q, reopen %v", rw.Err, rw.Reopen)
	}
	if tab := table([]row{rw}, cfg.spread); !strings.Contains(tab, "50: stopped at") {
		t.Fatalf("table:\n%s", tab)
	}
}
