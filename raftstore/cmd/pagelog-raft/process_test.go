package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

var loadTime = flag.Duration("cluster.load", 1500*time.Millisecond, "TestClusterProcesses: send load before and after the leader is killed")

// buildNode builds this command into dir.
func buildNode(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "pagelog-raft")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freePorts returns n ports free on 127.0.0.1 when it returns.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var lns []net.Listener
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

type proc struct {
	id, dir, http string
	args          []string
	cmd           *exec.Cmd
	log           *os.File
	alive         atomic.Bool
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.alive.Store(true)
}

// cluster is the client's view: three processes, and the one that leads.
type cluster struct {
	t      *testing.T
	procs  []*proc
	client *http.Client
	leader atomic.Pointer[proc]
}

func (c *cluster) post(p *proc, path string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	resp, err := c.client.Post("http://"+p.http+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// findLeader waits for a process that answers /status as ready.
func (c *cluster) findLeader() *proc {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if p := c.leader.Load(); p != nil && p.alive.Load() {
			return p
		}
		for _, p := range c.procs {
			if !p.alive.Load() {
				continue
			}
			resp, err := c.client.Get("http://" + p.http + "/status")
			if err != nil {
				continue
			}
			var st struct{ Ready bool }
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.Ready {
				c.leader.Store(p)
				return p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// call posts to the leader until an answer other than "not the leader"
// or a broken connection; ok is false when the outcome is unknown.
func (c *cluster) call(path string, body any) (code int, out []byte, ok bool) {
	for range 3 {
		p := c.findLeader()
		if p == nil {
			return 0, nil, false
		}
		code, out, err := c.post(p, path, body)
		if err == nil && code != http.StatusTemporaryRedirect && code != http.StatusServiceUnavailable {
			return code, out, true
		}
		c.leader.CompareAndSwap(p, nil)
		if err == nil && code == http.StatusServiceUnavailable && !bytes.Contains(out, []byte(`"unknown"`)) {
			continue // not the leader: nothing was done
		}
		return code, out, false
	}
	return 0, nil, false
}

// The record of what the cluster acknowledged and handed out.
type ledger struct {
	mu        sync.Mutex
	acked     map[uint64]string    // acknowledged sends: id -> body
	bodies    map[string]bool      // every body sent (acknowledged or not)
	received  map[uint64]string    // every id handed out at least once
	deletedAt map[uint64]time.Time // acknowledged deletes: when
	errs      []string
}

func (l *ledger) fail(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, a...))
	}
}

// TestClusterProcesses runs three pagelog-raft processes on 127.0.0.1,
// sends and consumes under load, kills the leader with SIGKILL, goes on
// through the new leader, restarts the killed node, and checks that no
// acknowledged send is lost, that each is received at least once, that
// none whose delete was acknowledged is handed out again, and that every
// node ends with the same messages.
func TestClusterProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three processes and a failover take about 15 s")
	}
	dir := t.TempDir()
	bin := buildNode(t, dir)
	ports := freePorts(t, 6)
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, ports[i]))
	}
	c := &cluster{t: t, client: &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	for i := range 3 {
		p := &proc{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), http: ports[3+i]}
		p.args = []string{"--id", p.id, "--dir", p.dir, "--http", p.http, "--peers", strings.Join(peers, ","),
			"--visibility", "2s", "--snapshot-threshold", "300", "--trailing-logs", "100", "--log-level", "warn"}
		var err error
		if p.log, err = os.Create(filepath.Join(dir, p.id+".log")); err != nil {
			t.Fatal(err)
		}
		p.start(t, bin)
		c.procs = append(c.procs, p)
	}
	defer func() {
		for _, p := range c.procs {
			if p.alive.Load() {
				p.cmd.Process.Signal(syscall.SIGKILL)
				p.cmd.Wait()
			}
			p.log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(p.log.Name())
				t.Logf("%s's log (last 3000 bytes):\n%s", p.id, b[max(0, len(b)-3000):])
			}
		}
	}()
	if c.findLeader() == nil {
		t.Fatal("no leader within 20 s")
	}

	l := &ledger{acked: map[uint64]string{}, bodies: map[string]bool{}, received: map[uint64]string{}, deletedAt: map[uint64]time.Time{}}
	var stopSend atomic.Bool
	var seq atomic.Int64
	var sends sync.WaitGroup
	for g := range 4 {
		sends.Add(1)
		go func() {
			defer sends.Done()
			for !stopSend.Load() {
				body := fmt.Sprintf("g%d-%d", g, seq.Add(1))
				l.mu.Lock()
				l.bodies[body] = true
				l.mu.Unlock()
				code, out, ok := c.call("/send", map[string]string{"body": body})
				if !ok {
					continue // outcome unknown: it may be committed, or not
				}
				var r struct{ IDs []uint64 }
				if code != 200 || json.Unmarshal(out, &r) != nil || len(r.IDs) != 1 {
					l.fail("send %s: %d %s", body, code, out)
					continue
				}
				l.mu.Lock()
				l.acked[r.IDs[0]] = body
				l.mu.Unlock()
			}
		}()
	}
	// Consumers delete what they receive, except ids divisible by 5: those
	// stay, to be compared at the end.
	var stopRecv atomic.Bool
	var idle atomic.Int64 // consecutive empty receives
	var recvs sync.WaitGroup
	for range 2 {
		recvs.Add(1)
		go func() {
			defer recvs.Done()
			for !stopRecv.Load() {
				start := time.Now()
				code, out, ok := c.call("/receive?wait=200ms", nil)
				if !ok || code == http.StatusNoContent {
					if ok {
						idle.Add(1)
					}
					continue
				}
				var m struct {
					ID   uint64
					Body string
				}
				if code != 200 || json.Unmarshal(out, &m) != nil {
					l.fail("receive: %d %s", code, out)
					continue
				}
				idle.Store(0)
				l.mu.Lock()
				if at, ok := l.deletedAt[m.ID]; ok && start.After(at) {
					l.errs = append(l.errs, fmt.Sprintf("id %d handed out %v after its delete was acknowledged", m.ID, start.Sub(at)))
				}
				if b, ok := l.acked[m.ID]; (ok && b != m.Body) || !l.bodies[m.Body] {
					l.errs = append(l.errs, fmt.Sprintf("id %d handed out with body %q (sent %q)", m.ID, m.Body, b))
				}
				l.received[m.ID] = m.Body
				l.mu.Unlock()
				if m.ID%5 == 0 { // kept: hidden for long, so that the queue drains
					c.call("/visibility", map[string]any{"id": m.ID, "timeout": "1h"})
					continue
				}
				for !stopRecv.Load() { // deletes are idempotent: retry until acknowledged
					code, out, ok := c.call("/delete", map[string][]uint64{"ids": {m.ID}})
					if ok && code == 200 {
						l.mu.Lock()
						if _, dup := l.deletedAt[m.ID]; !dup {
							l.deletedAt[m.ID] = time.Now()
						}
						l.mu.Unlock()
						break
					}
					if ok {
						l.fail("delete %d: %d %s", m.ID, code, out)
						break
					}
				}
			}
		}()
	}

	time.Sleep(*loadTime)
	old := c.findLeader()
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	old.alive.Store(false)
	old.cmd.Wait()
	killedAt := time.Now()
	l.mu.Lock()
	ackedBefore := len(l.acked)
	l.mu.Unlock()
	newLeader := c.findLeader()
	if newLeader == nil || newLeader == old {
		t.Fatal("no new leader after the kill")
	}
	t.Logf("killed leader %s after %d acknowledged sends; %s leads after %v", old.id, ackedBefore, newLeader.id, time.Since(killedAt))
	time.Sleep(*loadTime)
	stopSend.Store(true)
	sends.Wait()
	old.start(t, bin)

	// Drain: every acknowledged send must be handed out.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		missing := 0
		for id := range l.acked {
			if _, ok := l.received[id]; !ok {
				missing++
			}
		}
		l.mu.Unlock()
		if missing == 0 && idle.Load() >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged sends never handed out", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopRecv.Store(true)
	recvs.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	if len(l.acked) < 50 || len(l.acked) == ackedBefore {
		t.Fatalf("%d sends acknowledged, %d before the kill: too few to tell", len(l.acked), ackedBefore)
	}
	kept := 0
	for id := range l.received {
		if id%5 == 0 {
			kept++
		}
	}

	// Every node, the restarted one included, ends with the same
	// messages: those kept.
	var digests []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		digests = digests[:0]
		var first struct {
			Applied  uint64
			Messages int
			SHA256   string
		}
		same := true
		for i, p := range c.procs {
			resp, err := c.client.Get("http://" + p.http + "/digest")
			if err != nil {
				same = false
				break
			}
			var d struct {
				Applied  uint64
				Messages int
				SHA256   string
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if json.Unmarshal(b, &d) != nil {
				same = false
				break
			}
			digests = append(digests, string(b))
			if i == 0 {
				first = d
			}
			same = same && d == first
		}
		if same && first.Messages == kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes did not converge on %d messages: %q", kept, digests)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d sends acknowledged (%d before the kill), %d handed out, %d deletes acknowledged, %d kept; digests equal: %s",
		len(l.acked), ackedBefore, len(l.received), len(l.deletedAt), kept, strings.TrimSpace(digests[0]))
}
