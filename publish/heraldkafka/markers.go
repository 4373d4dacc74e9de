package heraldkafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald"
)

// A marker is one record per transaction in the marker topic: key = the
// transactional id, value = markerVersion then the event ids, one per line.
// One record per transaction rather than one per event keeps the topic,
// and the look-ups that read it, a batch size smaller than the events.
const markerVersion = "herald-published 1\n"

func encodeMarker(ids []string) []byte {
	n := len(markerVersion)
	for _, id := range ids {
		n += len(id) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, markerVersion...)
	for _, id := range ids {
		b = append(append(b, id...), '\n')
	}
	return b
}

// markerIDs calls fn with each event id of a marker's value; a value of
// another form names none.
func markerIDs(value []byte, fn func(id []byte)) {
	rest, ok := bytes.CutPrefix(value, []byte(markerVersion))
	if !ok {
		return
	}
	for len(rest) > 0 {
		line, after, _ := bytes.Cut(rest, []byte{'\n'})
		if len(line) > 0 {
			fn(line)
		}
		rest = after
	}
}

// ensureMarkerTopic creates the marker topic unless it exists; once it
// did, the publisher does not ask again.
func (p *Publisher) ensureMarkerTopic(ctx context.Context) error {
	p.tx.mu.Lock()
	created := p.tx.created
	p.tx.mu.Unlock()
	if created {
		return nil
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = p.tx.cfg.MarkerTopic
	t.NumPartitions = 1
	t.ReplicationFactor = -1 // the brokers' default
	for k, v := range map[string]string{
		"cleanup.policy": "delete",
		"retention.ms":   strconv.FormatInt(markerRetention.Milliseconds(), 10),
	} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(min(p.timeout, 30*time.Second).Milliseconds())
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return fmt.Errorf("heraldkafka: creating the marker topic %q: %w", p.tx.cfg.MarkerTopic, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("heraldkafka: creating the marker topic %q: the broker answered for %d topics", p.tx.cfg.MarkerTopic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		// A principal allowed to write the topic but not to create
		// topics is refused even when the topic exists: look.
		if _, merr := p.markerMetadata(ctx); merr != nil {
			return fmt.Errorf("heraldkafka: creating the marker topic %q: %w", p.tx.cfg.MarkerTopic, err)
		}
	}
	p.tx.mu.Lock()
	p.tx.created = true
	p.tx.mu.Unlock()
	return nil
}

// alreadyPublished returns the events of batch that a committed
// transaction already published. Only an event whose row was claimed
// before (Attempt above 1) can have been: its claim's relay may have
// committed and then died before the database heard of it. Events of a
// commit this process could not confirm nor deny (p.tx.unsure) are looked
// up too, whatever their attempt. Such events are looked up in the marker
// topic from their earliest CreatedAt, less the Lookback, to its end.
func (p *Publisher) alreadyPublished(ctx context.Context, batch []herald.Envelope) (map[string]bool, error) {
	var (
		want  []string
		since time.Time
	)
	for i := range batch {
		env := &batch[i]
		if env.Attempt <= 1 && !p.tx.isUnsure(env.ID) {
			continue
		}
		want = append(want, env.ID)
		if since.IsZero() || env.CreatedAt.Before(since) {
			since = env.CreatedAt
		}
	}
	if want == nil {
		return nil, nil
	}
	done, err := p.lookUp(ctx, want, since.Add(-p.tx.cfg.Lookback))
	if err != nil {
		return nil, err
	}
	p.tx.resolved(want)
	if len(done) > 0 {
		p.log.Info("events already published by an earlier attempt's transaction are not sent again",
			"events", len(done), "looked_up", len(want))
	}
	return done, nil
}

// lookUp returns those of ids that a committed marker at or after since
// names. It reads the marker topic as read_committed: a transaction still
// open there (a relay committing it right now) is waited for, up to the
// transaction timeout, whatever ctx's deadline; ctx being cancelled (the
// relay stopping) cuts it short.
func (p *Publisher) lookUp(ctx context.Context, ids []string, since time.Time) (map[string]bool, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = false
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.tx.cfg.Timeout+10*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	found := 0
	err := p.scanMarkers(lctx, since, func(id []byte) {
		if seen, ok := want[string(id)]; ok && !seen {
			want[string(id)] = true
			found++
		}
	})
	if err != nil {
		return nil, fmt.Errorf("heraldkafka: looking up %d events in %q: %w", len(ids), p.tx.cfg.MarkerTopic, err)
	}
	done := make(map[string]bool, found)
	for id, seen := range want {
		if seen {
			done[id] = true
		}
	}
	return done, nil
}

// scanMarkers reads every partition of the marker topic from the first
// record at or after since to the end it had when the scan began, as
// read_committed, and calls fn with each event id of each committed
// marker.
func (p *Publisher) scanMarkers(ctx context.Context, since time.Time, fn func(id []byte)) error {
	topic := p.tx.cfg.MarkerTopic
	mtop, err := p.markerMetadata(ctx)
	if err != nil {
		return err
	}
	for _, part := range mtop.Partitions {
		if err := kerr.ErrorForCode(part.ErrorCode); err != nil {
			return fmt.Errorf("partition %d: %w", part.Partition, err)
		}
		start, err := p.offsetAfter(ctx, topic, part.Partition, since)
		if err != nil {
			return fmt.Errorf("partition %d: %w", part.Partition, err)
		}
		if start < 0 {
			continue // no marker since then
		}
		if err := p.readMarkers(ctx, mtop.TopicID, topic, part.Partition, part.Leader, start, fn); err != nil {
			return fmt.Errorf("partition %d: %w", part.Partition, err)
		}
	}
	return nil
}

// markerMetadata returns the marker topic's metadata, or why there is
// none.
func (p *Publisher) markerMetadata(ctx context.Context) (*kmsg.MetadataResponseTopic, error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(p.tx.cfg.MarkerTopic)
	meta.Topics = append(meta.Topics, mt)
	meta.AllowAutoTopicCreation = false
	resp, err := meta.RequestWith(ctx, p.cl)
	if err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("metadata answered for %d topics", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, err
	}
	return &resp.Topics[0], nil
}

// offsetAfter is the offset of partition's first record stamped at or after
// t, -1 when there is none.
func (p *Publisher) offsetAfter(ctx context.Context, topic string, partition int32, t time.Time) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.CurrentLeaderEpoch = -1
	rp.Timestamp = max(t.UnixMilli(), 0)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		for _, rp := range t.Partitions {
			if rp.Partition != partition {
				continue
			}
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return 0, err
			}
			return rp.Offset, nil
		}
	}
	return 0, errors.New("no offset in the answer")
}

// readMarkers fetches partition from start up to its high watermark at
// the first fetch, as read_committed, and calls fn with the event ids of
// the committed markers below it. A transaction open there holds the
// partition's last stable offset back: the fetch waits for it to end.
func (p *Publisher) readMarkers(ctx context.Context, topicID [16]byte, topic string, partition, leader int32, start int64, fn func(id []byte)) error {
	var (
		offset = start
		end    = int64(-1)
	)
	for end < 0 || offset < end {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxWaitMillis = 250
		req.MinBytes = 1
		req.MaxBytes = 16 << 20
		req.IsolationLevel = 1 // read_committed
		req.SessionEpoch = -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = topic, topicID
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition = partition
		fp.FetchOffset = offset
		fp.CurrentLeaderEpoch = -1
		fp.LogStartOffset = -1
		fp.PartitionMaxBytes = 8 << 20
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		kresp, err := p.cl.Broker(int(leader)).Request(ctx, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("the fetch answered for another partition")
		}
		rp := &resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
			if errors.Is(err, kerr.OffsetOutOfRange) && offset < rp.LogStartOffset {
				// Deleted by retention meanwhile: what is gone is
				// older than anything the look-up can need.
				offset = rp.LogStartOffset
				continue
			}
			return err
		}
		if end < 0 {
			end = rp.HighWatermark
		}
		got, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: offset, IsolationLevel: kgo.ReadCommitted(), Topic: topic, Partition: partition,
		}, rp, kgo.DefaultDecompressor(), nil)
		if got.Err != nil {
			return got.Err
		}
		for _, rec := range got.Records {
			if rec.Offset < end {
				markerIDs(rec.Value, fn)
			}
		}
		if next > offset {
			offset = next
		} else if rp.LastStableOffset >= end && rp.HighWatermark >= end && len(rp.RecordBatches) == 0 {
			// Nothing left below end to read (what is left is gone).
			break
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("the marker topic's committed end stayed at %d below %d (a transaction still open): %w",
				rp.LastStableOffset, end, context.Cause(ctx))
		}
	}
	return nil
}

// isMarkerTopic reports whether topic is the marker topic of a transactional
// publisher (events are never produced to it).
func (p *Publisher) isMarkerTopic(topic string) bool {
	return p.tx != nil && strings.EqualFold(topic, p.tx.cfg.MarkerTopic)
}
