package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rollfleet/rollfleet/actors/collector"
	"github.com/rollfleet/rollfleet/bus"
	"github.com/rollfleet/rollfleet/control"
	"github.com/rollfleet/rollfleet/jobs"
	"github.com/rollfleet/rollfleet/messages"
	"github.com/rollfleet/rollfleet/trainer"
)

// gatherer reads the run's records, writes them, and keeps the summary.
// Every record is acknowledged only once it is written (and entered in the
// ledger), so the output streams hold what waits to be written, nothing
// more, and an interrupted run loses nothing.
type gatherer struct {
	opts   Options
	plan   *plan
	groups bool // the run reads its own groups
	coll   *collector.Collector
	ledger *Ledger

	sum  Summary
	done bitset // episodes decided in this process
	left int    // episodes still undecided

	// tally counts each unfinished group's decided members.
	tally          map[int]groupTally
	expectedGroups int // groups whose every member is a trajectory
	gotGroups      int
	groupsDone     bitset

	decided atomic.Int64 // episodes decided, for the submitter's window
	notify  chan struct{}

	out, fout, gout *bufio.Writer
	unacked         []record // handled, acknowledged at the next commit
}

// commitEvery bounds how many handled records wait for their commit.
const commitEvery = 256

// commitDelay is how long a commit waits for more records once none is
// waiting. Why wait at all: an output stream's reader that acknowledges
// each record as it comes empties the stream's last file store block with
// every acknowledgement, and the server then removes that block's file and
// creates the next one, which was the largest single cost of a turn on the
// server. A few milliseconds gather several records into one commit.
const commitDelay = 20 * time.Millisecond

func newGatherer(opts Options, p *plan, groups bool, coll *collector.Collector) *gatherer {
	g := &gatherer{
		opts: opts, plan: p, groups: groups, coll: coll, ledger: opts.Ledger,
		sum:  Summary{Episodes: p.Len(), FailureReasons: map[string]int{}, FailureKinds: map[string]int{}, Started: true},
		left: p.Len(), tally: map[int]groupTally{}, notify: make(chan struct{}, 1),
		out: bufio.NewWriterSize(opts.Out, 1<<20),
	}
	if g.ledger != nil {
		g.left -= g.ledger.Episodes()
	}
	if opts.FailuresOut != nil {
		g.fout = bufio.NewWriter(opts.FailuresOut)
	}
	if opts.GroupsOut != nil {
		g.gout = bufio.NewWriterSize(opts.GroupsOut, 1<<20)
	}
	return g
}

// groupTally counts a group's members decided in this process, and of
// them the failed ones.
type groupTally struct{ decided, failed int }

// waitDecided blocks until at least n episodes are decided.
func (g *gatherer) waitDecided(ctx context.Context, n int64) error {
	for g.decided.Load() < n {
		select {
		case <-g.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// groupsIdle is how long the run waits for a further group once every
// episode is decided: groups the collector filtered, or could not complete
// across a restart, never come.
const groupsIdle = 3 * time.Second

// gather handles records until every episode is decided and the expected
// groups have come, or ctx ends, or submission fails.
func (g *gatherer) gather(ctx context.Context, records <-chan record, submitErr <-chan error) (Summary, error) {
	unfinished := func(err error) (Summary, error) {
		_ = g.flush()
		return g.sum, fmt.Errorf("fleet: %d of %d episodes unfinished: %w", g.left, g.plan.Len(), err)
	}
	for g.left > 0 {
		select {
		case rec := <-records:
			if err := g.handleBatch(rec, records); err != nil {
				return g.sum, err
			}
		case err := <-submitErr:
			if err != nil {
				return unfinished(err)
			}
			submitErr = nil
		case <-ctx.Done():
			return unfinished(ctx.Err())
		}
	}
	idle := time.NewTimer(groupsIdle)
	defer idle.Stop()
	for g.groups && g.gotGroups < g.expectedGroups-g.filtered() {
		select {
		case rec := <-records:
			if err := g.handleBatch(rec, records); err != nil {
				return g.sum, err
			}
			idle.Reset(groupsIdle)
		case <-idle.C:
			g.opts.Logger.Warn("groups missing at the end of the run", "expected", g.expectedGroups-g.filtered(), "got", g.gotGroups)
			return g.sum, g.flush()
		case <-ctx.Done():
			_ = g.flush()
			return g.sum, ctx.Err()
		}
	}
	return g.sum, g.flush()
}

// filtered is how many complete groups the collector dropped by score,
// when it runs here.
func (g *gatherer) filtered() int {
	if g.coll == nil {
		return 0
	}
	return int(g.coll.Stats().GroupsFiltered)
}

// handleBatch handles rec and whatever else comes within commitDelay, up
// to commitEvery records, then commits them.
func (g *gatherer) handleBatch(rec record, records <-chan record) error {
	wait := time.NewTimer(commitDelay)
	defer wait.Stop()
	for more := true; more; {
		if err := g.handle(rec); err != nil {
			return err
		}
		more = false
		if len(g.unacked) < commitEvery {
			select {
			case rec = <-records:
				more = true
			case <-wait.C:
			}
		}
	}
	return g.commit()
}

// commit makes what was handled durable — the outputs written out and
// synced, then the ledger — and only then acknowledges the records, which
// frees them from their streams: after a power loss an acknowledged
// record is on disk, and the ledger names no line the outputs lost.
func (g *gatherer) commit() error {
	if err := g.flush(); err != nil {
		return err
	}
	for _, w := range []io.Writer{g.opts.Out, g.opts.FailuresOut, g.opts.GroupsOut} {
		// Only the run's output files are synced: a pipe cannot be.
		if o, ok := w.(*Output); ok {
			if err := o.Sync(); err != nil {
				return err
			}
		}
	}
	if g.ledger != nil {
		if err := g.ledger.flush(); err != nil {
			return err
		}
	}
	// Each kind is its own consumer: confirmed batch by batch, so that none
	// is lost when the run deletes its consumers at the end.
	byKind := map[string][]jetstream.Msg{}
	for _, r := range g.unacked {
		byKind[r.kind] = append(byKind[r.kind], r.msg)
	}
	for _, msgs := range byKind {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := bus.AckBatch(ctx, msgs)
		cancel()
		if err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
	}
	g.unacked = g.unacked[:0]
	return nil
}

func (g *gatherer) flush() error {
	for _, w := range []*bufio.Writer{g.fout, g.gout, g.out} {
		if w == nil {
			continue
		}
		if err := w.Flush(); err != nil {
			return fmt.Errorf("fleet: write output: %w", err)
		}
	}
	return nil
}

// handle writes one record, to be acknowledged at the next commit.
func (g *gatherer) handle(rec record) error {
	var err error
	switch rec.kind {
	case trainer.KindTrajectory:
		err = g.trajectory(rec.msg)
	case trainer.KindFailure:
		err = g.failure(rec.msg)
	case trainer.KindGroup:
		err = g.group(rec.msg)
	}
	if err != nil {
		// Not acknowledged: the record stays for the next reader.
		return err
	}
	g.unacked = append(g.unacked, rec)
	return nil
}

// claim reports whether episode id is one of the run's, decided for the
// first time; a second outcome is counted, a redelivery of one written is
// not.
func (g *gatherer) claim(m jetstream.Msg, id string) (int, bool) {
	i, ok := jobs.EpisodeIndex(g.plan.RunID(), id)
	if !ok || i >= g.plan.Len() {
		g.sum.Malformed++
		return 0, false
	}
	if g.done.has(i) || (g.ledger != nil && g.ledger.Episode(i)) {
		if meta, err := m.Metadata(); err == nil && meta.NumDelivered == 1 && g.done.has(i) {
			g.sum.Duplicates++
		}
		return 0, false
	}
	return i, true
}

// decide enters episode i as written.
func (g *gatherer) decide(i int, trajectory bool) {
	if g.ledger != nil {
		g.ledger.addEpisode(i)
	}
	g.done.add(i)
	g.left--
	g.decided.Add(1)
	select {
	case g.notify <- struct{}{}:
	default:
	}
	grp := i / g.opts.NSamples
	t := g.tally[grp]
	t.decided++
	if !trajectory {
		t.failed++
	}
	g.tally[grp] = t
	if t.decided == g.opts.NSamples {
		// A group is published when all its members are trajectories.
		delete(g.tally, grp)
		if t.failed == 0 {
			g.expectedGroups++
		}
	}
	if g.opts.Progress != nil {
		g.opts.Progress(g.plan.Len()-g.left, g.plan.Len())
	}
}

func (g *gatherer) trajectory(m jetstream.Msg) error {
	t, err := messages.Decode[messages.Trajectory](m.Data())
	if err != nil {
		g.sum.Malformed++ // not ours to fix; the run goes on
		return nil
	}
	i, ok := g.claim(m, t.EpisodeID)
	if !ok {
		return nil
	}
	// With a filter, the output holds the kept groups' trajectories,
	// written as their group comes.
	if g.opts.Filter == nil {
		if err := g.writeTrajectory(t); err != nil {
			return err
		}
	}
	g.sum.countTrajectory(t)
	g.decide(i, true)
	return nil
}

func (g *gatherer) failure(m jetstream.Msg) error {
	f, err := messages.Decode[messages.Failure](m.Data())
	if err != nil {
		g.sum.Malformed++
		return nil
	}
	if f.EpisodeID == "" {
		g.sum.Malformed++ // the record of a message that belonged to no episode
		return nil
	}
	i, ok := g.claim(m, f.EpisodeID)
	if !ok {
		return nil
	}
	if g.fout != nil {
		if err := WriteRecord(g.fout, f); err != nil {
			return fmt.Errorf("fleet: write failure %s: %w", f.EpisodeID, err)
		}
	}
	g.sum.countFailure(f)
	g.decide(i, false)
	return nil
}

func (g *gatherer) group(m jetstream.Msg) error {
	if g.gout == nil && g.opts.Filter == nil {
		// Read only so that the stream frees them.
		g.gotGroups++
		g.sum.GroupsKept++
		return nil
	}
	grp, err := messages.Decode[messages.Group](m.Data())
	if err != nil {
		g.sum.Malformed++
		return nil
	}
	gi, ok := jobs.GroupIndex(g.plan.RunID(), grp.GroupID)
	if !ok || g.groupsDone.has(gi) || (g.ledger != nil && g.ledger.Group(gi)) {
		return nil
	}
	if g.gout != nil {
		if err := WriteRecord(g.gout, grp); err != nil {
			return fmt.Errorf("fleet: write group %s: %w", grp.GroupID, err)
		}
	}
	if g.opts.Filter != nil {
		for k := range grp.Trajectories {
			if err := g.writeTrajectory(&grp.Trajectories[k]); err != nil {
				return err
			}
		}
	}
	if g.ledger != nil {
		g.ledger.addGroup(gi)
	}
	g.groupsDone.add(gi)
	g.gotGroups++
	g.sum.GroupsKept++
	return nil
}

// writeTrajectory writes one trajectory to the output in the run's format.
func (g *gatherer) writeTrajectory(t *messages.Trajectory) error {
	if g.opts.Format == FormatNeMoGym {
		return g.plan.writeNeMoRecord(g.out, t)
	}
	return writeTrajectory(g.out, t)
}

// writeTrajectory writes one trajectory JSON line.
func writeTrajectory(w io.Writer, t *messages.Trajectory) error {
	if err := WriteRecord(w, t); err != nil {
		return fmt.Errorf("fleet: write trajectory %s: %w", t.EpisodeID, err)
	}
	return nil
}

// watchPolicy keeps the plan's policy version current, for the episodes
// made from now on, and reports each change of the policy state, the first
// at once.
func watchPolicy(ctx context.Context, ctl *control.Watcher, p *plan, report func(messages.PolicyState)) {
	for {
		changed := ctl.Changed()
		st := ctl.State()
		p.SetVersion(st.Version)
		if report != nil {
			report(st)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// watchInterval is how often the output streams are checked for being full.
const watchInterval = 2 * time.Second

// watchFull reports, through opts.Full and the log (once a minute per
// stream), the output streams that are full: nobody reads what they hold,
// so outcomes wait and submission stops with them.
func watchFull(ctx context.Context, js jetstream.JetStream, subj messages.Subjects, coll *collector.Collector, opts Options) {
	streams := map[string]string{
		trainer.KindTrajectory: subj.StreamTrajectories(), trainer.KindFailure: subj.StreamFailures(), trainer.KindGroup: subj.StreamGroups(),
	}
	var last []string
	logged := map[string]time.Time{}
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var full []string
		if coll != nil {
			full = coll.Stats().FullStreams
		}
		for kind, name := range streams {
			if slices.Contains(full, kind) {
				continue
			}
			st, err := js.Stream(ctx, name)
			if err == nil && streamFull(st.CachedInfo(), js.Conn().MaxPayload()) {
				full = append(full, kind)
			}
		}
		slices.Sort(full)
		now := time.Now()
		for _, kind := range full {
			if now.Sub(logged[kind]) >= time.Minute {
				opts.Logger.Warn(kind+" stream full: no consumer is reading", "stream", streams[kind])
				logged[kind] = now
			}
		}
		if !slices.Equal(full, last) {
			last = full
			if opts.Full != nil {
				opts.Full(full)
			}
		}
	}
}

// streamFull reports whether a stream that refuses messages when full
// (DiscardNew) is within a record's size of its limits: less room than a
// sixty-fourth of its bytes (at most the largest message) left.
func streamFull(info *jetstream.StreamInfo, maxPayload int64) bool {
	cfg, st := info.Config, info.State
	if cfg.Discard != jetstream.DiscardNew {
		return false
	}
	room := min(maxPayload, cfg.MaxBytes/64)
	return cfg.MaxBytes > 0 && int64(st.Bytes)+room >= cfg.MaxBytes || cfg.MaxMsgs > 0 && int64(st.Msgs) >= cfg.MaxMsgs
}
