package testkit

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Child returns a command that runs the test named test alone in this
// test binary (-test.run=^test$), with env added to this process's
// environment: the child of a crash test, which the test tells apart by
// that environment. Where the system allows (Linux), the child is killed
// when this process dies.
func Child(test string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	dieWithParent(cmd)
	return cmd
}

// StartChild starts cmd and returns its stdout, as a pipe, and what it
// writes to stderr.
func StartChild(t testing.TB, cmd *exec.Cmd) (stdout io.ReadCloser, stderr *bytes.Buffer) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdout, stderr
}

// Lines returns the lines of a child's stdout as they come, without their
// newline; the channel is closed when the output ends. A last line without
// its newline (cut short by a kill) is dropped: it says nothing.
func Lines(stdout io.Reader, buffered int) <-chan string {
	lines := make(chan string, buffered)
	go func() {
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimSuffix(line, "\n")
		}
	}()
	return lines
}

// KilledBySIGKILL reports whether err, from a child's Wait, says that
// SIGKILL ended it.
func KilledBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
