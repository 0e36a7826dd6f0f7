package fleetstatus

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rollfleet/rollfleet/messages"
)

// WriteText writes the snapshot as aligned text tables: streams, consumers,
// the policy, workers, batches and runs, each saying so when it is empty.
func WriteText(w io.Writer, s *Snapshot) error {
	p := &printer{w: w}
	server := "NATS server"
	if s.Server != "" {
		server += " " + s.Server
	}
	p.line("%s · prefix %s · %s", server, s.Prefix, s.Time.Format(time.RFC3339))

	p.section("STREAMS")
	if len(s.Streams) == 0 {
		p.line("no rollfleet streams: nothing has connected to this server as a fleet yet (any worker, rollout run or a trainer creates them)")
	} else {
		t := p.table("STREAM", "MESSAGES", "BYTES", "MAX BYTES", "FULL", "MAX AGE", "MAX/SUBJECT", "RETENTION", "DISCARD", "CONSUMERS")
		for _, st := range s.Streams {
			t.row(st.Name, st.Messages, bytesText(int64(st.Bytes)), limitBytes(st.MaxBytes), percent(st.Full(), st.MaxBytes > 0),
				ageText(st.MaxAgeSeconds), limitCount(st.MaxMsgsPerSubject), st.Retention, st.Discard, len(st.Consumers))
		}
		t.flush()
	}
	if len(s.Missing) > 0 {
		p.line("not created yet: %s", strings.Join(s.Missing, ", "))
	}

	var consumers int
	for _, st := range s.Streams {
		consumers += len(st.Consumers)
	}
	if len(s.Streams) > 0 {
		p.section("CONSUMERS")
		if consumers == 0 {
			p.line("no consumers: nothing reads the streams")
		} else {
			t := p.table("STREAM", "CONSUMER", "RUN", "PENDING", "ACK PENDING", "REDELIVERED", "WAITING", "DELIVERED", "LAST ACTIVE")
			for _, st := range s.Streams {
				for _, c := range st.Consumers {
					run := "*"
					if c.Run != "" {
						run = c.Run
					}
					t.row(st.Name, c.Name, run, c.Pending, c.AckPending, c.Redelivered, c.Waiting, c.Delivered, sinceText(s.Time, c.LastActive))
				}
			}
			t.flush()
		}
	}

	p.section("POLICY")
	if s.Policy == nil {
		p.line("no policy state (no control stream): version 0, running")
	} else {
		p.line("%s", policyText(s.Policy))
	}

	p.section("WORKERS")
	if len(s.Workers) == 0 {
		p.line("no workers answered the status request on %s.control.workers", s.Prefix)
	} else {
		t := p.table("KIND", "WORKERS", "IN FLIGHT", "HELD", "PAUSED", "BEHIND")
		for _, k := range s.Kinds {
			t.row(k.Kind, k.Workers, k.InFlight, k.Held, k.Paused, k.Behind)
		}
		t.flush()
		p.line("")
		t = p.table("KIND", "ID", "HEALTH", "EPOCH", "VERSION", "IN FLIGHT", "HELD")
		for _, w := range s.Workers {
			t.row(w.Kind, w.ID, w.Health, w.Epoch, w.Version, w.InFlight, w.Held)
		}
		t.flush()
	}

	p.section("BATCHES")
	if len(s.Batches) == 0 {
		p.line("no trainer batches")
	} else {
		t := p.table("BATCH", "ENV", "EPISODES", "DECIDED", "TRAJECTORIES", "FAILURES", "GROUPS", "GROUPS OUT", "PENDING G/T/F", "DONE", "SUBMIT VERSION")
		for _, b := range s.Batches {
			m := b.Manifest
			t.row(m.BatchID, m.Env, m.Episodes, progressText(b.Decided, b.Episodes), b.Trajectories, b.Failures, m.Groups,
				b.GroupsDelivered, fmt.Sprintf("%d/%d/%d", b.Pending["group"], b.Pending["trajectory"], b.Pending["failure"]),
				yesNo(b.Done), "v"+strconv.FormatInt(m.SubmitVersion, 10))
		}
		t.flush()
	}

	p.section("RUNS")
	if len(s.Runs) == 0 {
		p.line("no runs: no episodes, steps, decisions or records in the streams")
	} else {
		t := p.table("RUN", "KIND", "STATE", "EPISODES", "QUEUED", "PLAYING", "DECIDED", "TRAJ WAITING", "GROUPS WAITING", "FAIL WAITING", "READERS (PENDING+ACK)")
		for _, r := range s.Runs {
			id, kind, state, eps := r.ID, r.Kind, "done", "?"
			if id == "" {
				id = "(none)"
			}
			if kind == "" {
				kind = "-"
			}
			if r.Active() {
				state = "active"
			}
			if r.Episodes > 0 {
				eps = strconv.Itoa(r.Episodes)
			}
			var readers []string
			for _, rd := range r.Readers {
				// The run's own token says nothing here: "run-<run>-trajectory"
				// reads "run-trajectory".
				name := strings.Replace(rd.Consumer, "-"+messages.NameToken(r.ID), "", 1)
				readers = append(readers, fmt.Sprintf("%s=%d", name, rd.Pending+uint64(rd.AckPending)))
			}
			if len(readers) == 0 {
				readers = []string{"-"}
			}
			t.row(id, kind, state, eps, r.Queued, r.Playing, r.Decided, r.Trajectories, r.Groups, r.Failures, strings.Join(readers, " "))
		}
		t.flush()
	}

	if len(s.Errors) > 0 {
		p.section("ERRORS")
		for _, e := range s.Errors {
			p.line("%s", e)
		}
	}
	return p.err
}

// printer writes lines and tables, keeping the first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) line(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format+"\n", args...)
	}
}

func (p *printer) section(title string) {
	p.line("")
	p.line("%s", title)
}

func (p *printer) table(header ...string) *table {
	t := &table{p: p, tw: tabwriter.NewWriter(p.w, 0, 0, 2, ' ', 0)}
	t.cells(header)
	return t
}

// table is one aligned table.
type table struct {
	p  *printer
	tw *tabwriter.Writer
}

func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	t.cells(s)
}

func (t *table) cells(cells []string) {
	if t.p.err == nil {
		_, t.p.err = fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
	}
}

func (t *table) flush() {
	if err := t.tw.Flush(); err != nil && t.p.err == nil {
		t.p.err = err
	}
}

// policyText says the policy state in one line.
func policyText(p *messages.PolicyState) string {
	state := "running"
	if p.Paused {
		on := p.OnPause
		if on == "" {
			on = messages.OnPauseFinish
		}
		state = "paused (on_pause " + on + ")"
	}
	s := fmt.Sprintf("version %d · %s · epoch %d", p.Version, state, p.Epoch)
	if p.Time > 0 {
		s += " · announced " + time.Unix(0, p.Time).UTC().Format(time.RFC3339)
	}
	return s
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if n%div == 0 {
		return fmt.Sprintf("%.0f %ciB", v, "KMGTPE"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}

func limitBytes(n int64) string {
	if n <= 0 {
		return "-"
	}
	return bytesText(n)
}

func limitCount(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func percent(f float64, limited bool) string {
	if !limited {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", f*100)
}

func ageText(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return d.String()
}

func sinceText(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	d := now.Sub(*t)
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String() + " ago"
}

func progressText(done, of int) string {
	if of <= 0 {
		return strconv.Itoa(done)
	}
	return fmt.Sprintf("%d/%d (%.0f%%)", done, of, 100*float64(done)/float64(of))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
