package heraldbackfill_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldbackfill"
)

// jumpClock moves time forward by what is waited for, at once.
type jumpClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *jumpClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *jumpClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// fakeStore is a source of rows numbered 1 to rows, recorded in memory;
// backlog gives ReadyBacklog's answers in turn (0 once they run out).
type fakeStore struct {
	rows    int
	last    int
	backlog []int
	written []herald.Message
}

func (s *fakeStore) BackfillStart(context.Context, heraldbackfill.StartParams) (heraldbackfill.Progress, error) {
	return s.progress(), nil
}

func (s *fakeStore) progress() heraldbackfill.Progress {
	p := heraldbackfill.Progress{Rows: int64(s.last), Done: s.last >= s.rows}
	if s.last > 0 {
		p.LastKey = []string{strconv.Itoa(s.last)}
	}
	return p
}

func (s *fakeStore) BackfillBatch(_ context.Context, p heraldbackfill.BatchParams) (heraldbackfill.BatchResult, error) {
	var rows []heraldbackfill.Row
	for i := s.last + 1; i <= s.rows && len(rows) < p.Limit; i++ {
		rows = append(rows, heraldbackfill.Row{Key: strconv.Itoa(i), Payload: []byte("{}")})
	}
	msgs, err := p.Messages(rows)
	if err != nil {
		return heraldbackfill.BatchResult{}, err
	}
	s.written = append(s.written, msgs...)
	s.last += len(rows)
	prog := s.progress()
	prog.Done = len(rows) < p.Limit
	return heraldbackfill.BatchResult{Rows: len(rows), Progress: prog}, nil
}

func (s *fakeStore) BackfillCount(context.Context, heraldbackfill.StartParams) (heraldbackfill.Progress, int64, error) {
	return s.progress(), int64(s.rows - s.last), nil
}
func (s *fakeStore) BackfillReset(context.Context, string) error { s.last = 0; return nil }
func (s *fakeStore) ReadyBacklog(context.Context, int) (int, error) {
	if len(s.backlog) == 0 {
		return 0, nil
	}
	n := s.backlog[0]
	s.backlog = s.backlog[1:]
	return n, nil
}

func fakeConfig(clock herald.Clock) *heraldbackfill.Config {
	return &heraldbackfill.Config{Name: "fake", Topic: "t", BatchSize: 10, Clock: clock,
		Source: heraldbackfill.Source{Table: "items", KeyColumns: []string{"id"}}}
}

func TestRunKeepsUnderItsRate(t *testing.T) {
	t.Parallel()
	clock := &jumpClock{now: time.Unix(0, 0)}
	cfg := fakeConfig(clock)
	cfg.Rate = 100 // rows a second: a batch of 10 every 100ms
	store := &fakeStore{rows: 50}
	b, err := heraldbackfill.New(store, cfg)
	require.NoError(t, err)
	sum, err := b.Run(t.Context())
	require.NoError(t, err)
	require.True(t, sum.Done)
	require.Equal(t, 6, sum.Batches, "5 full batches and the empty one that finds the end")
	require.Equal(t, 500*time.Millisecond, sum.Throttled, "each batch after the first waits for the rows before it")
	require.Equal(t, 500*time.Millisecond, sum.Elapsed)
}

func TestRunPausesWhileTheBacklogIsOverItsBound(t *testing.T) {
	t.Parallel()
	clock := &jumpClock{now: time.Unix(0, 0)}
	cfg := fakeConfig(clock)
	cfg.MaxBacklog, cfg.BacklogPoll = 100, time.Second
	store := &fakeStore{rows: 20, backlog: []int{101, 101, 100, 0, 101}}
	var reports []heraldbackfill.Report
	cfg.Progress = func(r heraldbackfill.Report) { reports = append(reports, r) }
	b, err := heraldbackfill.New(store, cfg)
	require.NoError(t, err)
	sum, err := b.Run(t.Context())
	require.NoError(t, err)
	require.True(t, sum.Done)
	require.Equal(t, 3*time.Second, sum.Paused, "two polls over the bound before the first batch, one before the third")
	require.Len(t, reports, 3)
	require.EqualValues(t, 20, reports[2].Rows)
	require.EqualValues(t, 20, reports[0].Total)
}

func TestRunMarksAndBuildsEachEvent(t *testing.T) {
	t.Parallel()
	store := &fakeStore{rows: 3}
	cfg := fakeConfig(nil)
	cfg.Type = "snapshot"
	b, err := heraldbackfill.New(store, cfg)
	require.NoError(t, err)
	_, err = b.Run(t.Context())
	require.NoError(t, err)
	require.Len(t, store.written, 3)
	require.Equal(t, herald.Message{Topic: "t", Key: "1", Type: "snapshot", Payload: []byte("{}")}, store.written[0])

	cfg.Map = func(r heraldbackfill.Row) (herald.Message, error) {
		if r.Key == "2" {
			return herald.Message{}, fmt.Errorf("row %s is odd", r.Key)
		}
		return herald.Message{Key: "m" + r.Key}, nil
	}
	cfg.Restart = true
	b, err = heraldbackfill.New(store, cfg)
	require.NoError(t, err)
	_, err = b.Run(t.Context())
	require.ErrorContains(t, err, "Config.Map: row 1 of the batch: row 2 is odd")
}

func TestRunStopsBetweenBatchesWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	store := &fakeStore{rows: 100}
	cfg := fakeConfig(nil)
	ctx, cancel := context.WithCancel(t.Context())
	cfg.Progress = func(r heraldbackfill.Report) {
		if r.RunRows == 30 {
			cancel()
		}
	}
	b, err := heraldbackfill.New(store, cfg)
	require.NoError(t, err)
	sum, err := b.Run(ctx)
	require.NoError(t, err)
	require.True(t, sum.Stopped)
	require.False(t, sum.Done)
	require.Equal(t, []string{"30"}, sum.LastKey)
	require.Len(t, store.written, 30)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	src := heraldbackfill.Source{Table: "items", KeyColumns: []string{"id"}}
	for _, c := range []struct {
		cfg  heraldbackfill.Config
		want string
	}{
		{heraldbackfill.Config{Topic: "t", Source: src}, "Config.Name is required"},
		{heraldbackfill.Config{Name: "n", Source: src}, "Config.Topic is required"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: src, BatchSize: -1}, "Config.BatchSize"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: src, Rate: -1}, "Config.Rate"},
		{heraldbackfill.Config{Name: "n", Topic: "t"}, "give a Table or a Query"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: heraldbackfill.Source{Table: "a;drop", KeyColumns: []string{"id"}}}, "Source.Table"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: heraldbackfill.Source{Table: "a", KeyColumns: []string{"id desc"}}}, "Source.KeyColumns"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: heraldbackfill.Source{Table: "a"}}, "Source.KeyColumns is required"},
		{heraldbackfill.Config{Name: "n", Topic: "t", Source: heraldbackfill.Source{Table: "a", Query: "SELECT 1", KeyColumns: []string{"id"}}}, "not both"},
	} {
		_, err := heraldbackfill.New(&fakeStore{}, &c.cfg)
		require.ErrorContains(t, err, c.want)
	}
	_, err := heraldbackfill.New(struct{}{}, &heraldbackfill.Config{Name: "n", Topic: "t", Source: src})
	require.ErrorContains(t, err, "cannot run backfills: only PostgreSQL's")
}
