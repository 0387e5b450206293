package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pagelog/pagelog/engine"
	"github.com/pagelog/pagelog/metrics"
	"github.com/pagelog/pagelog/queue"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// servedOnly are the metrics `pagelog serve` has and the collectors do not:
// what only the files tell.
var servedOnly = []string{"pagelog_disk_bytes", "pagelog_queue_lost_messages"}

// `pagelog serve` writes the text format by hand (the library's go.mod has
// no client_golang). Its output, scraped beside the process that has the
// queue open, must parse, pass the linter, and agree with the collectors
// registered in that process: same names, help, types and labels, and the
// same values for what the files tell.
func TestServeAgreesWithCollectors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the pagelog command")
	}
	clk := queue.NewManualClock(time.Now())
	dir := filepath.Join(t.TempDir(), "jobs")
	q := openQueue(t, dir, queue.Options{Clock: clk, MaxReceives: 1, Visibility: time.Second})
	for i := range 12 {
		if _, err := q.Send([]byte(fmt.Sprintf("%1024d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // 0 and 1 deleted, 2 moves to the dead letters
		m, err := q.Receive(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset < 2 {
			if err := q.Delete(m.Offset); err != nil {
				t.Fatal(err)
			}
		}
	}
	clk.Advance(2 * time.Second)
	waitFor(t, func() bool { return q.Stats().DeadLetters == 1 })

	served := scrapeServe(t, dir)
	ro, err := engine.OpenReadOnly(dir, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	collected := map[string]*dto.MetricFamily{}
	for name, mf := range gather(t, metrics.NewQueueCollector(q, "jobs")) {
		collected[name] = mf
	}
	for name, mf := range gather(t, metrics.NewLogCollector(ro, "jobs")) {
		collected[name] = mf
	}

	var only []string
	for name, s := range served {
		c, ok := collected[name]
		if !ok {
			only = append(only, name)
			continue
		}
		if s.GetHelp() != c.GetHelp() || s.GetType() != c.GetType() {
			t.Errorf("%s: served as %v %q, collected as %v %q", name, s.GetType(), s.GetHelp(), c.GetType(), c.GetHelp())
		}
		if len(s.Metric) != 1 || len(c.Metric) != 1 || labelsOf(s.Metric[0]) != labelsOf(c.Metric[0]) {
			t.Errorf("%s: served %v, collected %v", name, s.Metric, c.Metric)
			continue
		}
		sv, cv := s.Metric[0].GetGauge().GetValue(), c.Metric[0].GetGauge().GetValue()
		switch name {
		case "pagelog_queue_checkpointed_offset": // written by the owner on its own schedule
			if sv > cv {
				t.Errorf("%s: served %v beyond the owner's %v", name, sv, cv)
			}
		case "pagelog_queue_oldest_message_age_seconds": // both estimates, at two moments
			if sv <= 0 || math.Abs(sv-cv) > 1 {
				t.Errorf("%s: served %v, collected %v", name, sv, cv)
			}
		default:
			if sv != cv {
				t.Errorf("%s: served %v, collected %v", name, sv, cv)
			}
		}
	}
	sort.Strings(only)
	if fmt.Sprint(only) != fmt.Sprint(servedOnly) {
		t.Errorf("served but not collected: %v, want %v", only, servedOnly)
	}
	for _, name := range []string{"pagelog_queue_depth", "pagelog_queue_dead_letters", "pagelog_next_offset", "pagelog_queue_oldest_message_age_seconds"} {
		if served[name] == nil {
			t.Errorf("%s not served", name)
		}
	}
	if got := served["pagelog_queue_depth"].Metric[0].GetGauge().GetValue(); got != 9 {
		t.Errorf("served depth %v, want 9", got)
	}
	if s := served["pagelog_disk_bytes"]; s == nil || s.Metric[0].GetGauge().GetValue() < 12*1024 {
		t.Errorf("pagelog_disk_bytes: %v", s)
	}
}

func labelsOf(m *dto.Metric) string {
	var s []string
	for _, l := range m.Label {
		s = append(s, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(s, ",")
}

// scrapeServe runs `pagelog serve` on dir (label "jobs"), scrapes it once,
// lints and parses the text, and stops it with SIGTERM.
func scrapeServe(t *testing.T, dir string) map[string]*dto.MetricFamily {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pagelog")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pagelog/pagelog/cmd/pagelog").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--dir", dir, "--listen", "127.0.0.1:0", "--name", "jobs")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("pagelog serve: %v\n%s", err, stderr.String())
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n') // the command prints it at once
	url, ok := strings.CutPrefix(line, "serving ")
	url, _, _ = strings.Cut(url, " ")
	if err != nil || !ok {
		t.Fatalf("pagelog serve said %q (%v)\n%s", line, err, stderr.String())
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, text)
	}
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header) != expfmt.NewFormat(expfmt.TypeTextPlain) {
		t.Errorf("Content-Type %q is not the text format", ct)
	}
	problems, err := promlint.New(strings.NewReader(string(text))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(text)))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text)
	}
	return mfs
}
