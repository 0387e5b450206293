package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pagelog/pagelog/internal/testkit"
)

// The commands that read a store (stats, verify, queue stats, queue dead)
// on a store whose files are damaged, missing or replaced: each finishes,
// exits 0, 1 or 2 without a crash, and says what is wrong when it fails.
func TestStoreCommandsOnDamagedStoreFilesFinishWithoutACrash(t *testing.T) {
	bin := pagelogBinary(t)
	base := filepath.Join(t.TempDir(), "store")
	storeRun(t, 0, "a0\na1\n", "queue", "send", "--store", base, "--queue", "a")
	storeRun(t, 0, "b0\n", "queue", "send", "--store", base, "--queue", "b")
	outside := t.TempDir()
	seg := "00000000000000000000.log"
	damages := map[string]func(dir, sub string) error{
		"removed": func(dir, sub string) error { return os.RemoveAll(filepath.Join(dir, sub)) },
		"a FIFO": func(dir, sub string) error {
			p := filepath.Join(dir, sub)
			return errors.Join(os.RemoveAll(p), testkit.Mkfifo(p))
		},
		"a file": func(dir, sub string) error {
			p := filepath.Join(dir, sub)
			return errors.Join(os.RemoveAll(p), os.WriteFile(p, []byte("x"), 0o600))
		},
		"a link elsewhere": func(dir, sub string) error {
			p := filepath.Join(dir, sub)
			o := filepath.Join(outside, strings.ReplaceAll(p, "/", "_"))
			return errors.Join(os.Rename(p, o), os.Symlink(o, p))
		},
		"its segment a FIFO": func(dir, sub string) error {
			p := filepath.Join(dir, sub, seg)
			return errors.Join(os.Remove(p), testkit.Mkfifo(p))
		},
		"its segment cut to 7 bytes": func(dir, sub string) error { return os.Truncate(filepath.Join(dir, sub, seg), 7) },
		"its first record flipped": func(dir, sub string) error {
			p := filepath.Join(dir, sub, seg)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[10] ^= 0xff
			return os.WriteFile(p, b, 0o600)
		},
		"its log.meta newer": func(dir, sub string) error {
			p := filepath.Join(dir, sub, "log.meta")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[0]++ // the version; the checksum no longer matches either
			return os.WriteFile(p, b, 0o600)
		},
	}
	for _, sub := range []string{"names", "heads", "messages", "deletes", "receives"} {
		for what, damage := range damages {
			t.Run(sub+" "+what, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "store")
				if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
					t.Fatal(err)
				}
				if err := damage(dir, sub); err != nil {
					t.Fatal(err)
				}
				for _, args := range [][]string{
					{"stats", "--dir", dir},
					{"verify", "--dir", dir},
					{"queue", "stats", "--store", dir, "--queue", "a"},
					{"queue", "dead", "--store", dir, "--queue", "a"},
				} {
					r := hqExec(t, bin, "", args...)
					name := "pagelog " + strings.Join(args[:len(args)-2], " ")
					switch {
					case r.timedOut:
						t.Fatalf("%s did not finish", name)
					case r.code < 0 || r.code > 2:
						t.Errorf("%s: exit %d\nstderr: %s", name, r.code, r.stderr)
					case crashOutput.MatchString(r.stderr):
						t.Errorf("%s crashed:\n%s", name, r.stderr)
					case r.code != 0 && strings.TrimSpace(r.stderr+r.stdout) == "":
						t.Errorf("%s: exit %d and not a word", name, r.code)
					}
					for _, line := range strings.Split(r.stdout, "\n") {
						if strings.HasPrefix(line, "0\t") && args[0] == "queue" && !strings.HasPrefix(line, "0\ta") {
							t.Errorf("%s prints %q, not a message of queue a", name, line)
						}
					}
				}
			})
		}
	}
}
