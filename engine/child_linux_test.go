//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// startChild starts cmd, a child test process that dies with this one
// (Pdeathsig), and returns its stdout, as a pipe, and its stderr.
func startChild(t *testing.T, cmd *exec.Cmd) (stdout io.ReadCloser, stderr *bytes.Buffer) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return stdout, stderr
}

// childLines returns the lines of a child's stdout as they come, without
// their newline; the channel is closed when the output ends. A last line
// without its newline (cut short by a kill) is dropped: it says nothing.
func childLines(stdout io.Reader, buffered int) <-chan string {
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
