package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// A region's outbox: with Options.Outbox, every push (op 'X', SyncOnce)
// also queues each key's counts for each other region, in a hash per
// remote region and hash slot of this region's Redis (lua/op_sync.lua),
// until an Exchange forwards them. The keys, per slot tag:
//
//	PREFIX:{TAG}:xout:REGION    counts not yet sealed for REGION
//	PREFIX:{TAG}:xseal:REGION   the sealed batch being sent to REGION
//	PREFIX:{TAG}:xstate:REGION  the batch's seq and the slot's epoch
//
// and, under the tag {exchange}, the tags with an outbox (tags), each
// remote's lease (lease:REGION) and the links' times (links).

// maxRegionName bounds a region's name, which is part of keys.
const maxRegionName = 64

// checkRegion reports whether r can name a region.
func checkRegion(r string) error {
	if r == "" || len(r) > maxRegionName {
		return fmt.Errorf("redisstore: a region's name is 1 to %d characters, got %q", maxRegionName, r)
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("redisstore: region %q: only letters, digits, '.', '_' and '-'", r)
		}
	}
	return nil
}

func (s *Store) outboxKey(tag, region string) string {
	return s.prefix + ":{" + tag + "}:xout:" + region
}

func (s *Store) sealedKey(tag, region string) string {
	return s.prefix + ":{" + tag + "}:xseal:" + region
}

func (s *Store) xstateKey(tag, region string) string {
	return s.prefix + ":{" + tag + "}:xstate:" + region
}

func (s *Store) exchangeKey(name string) string { return s.prefix + ":{exchange}:" + name }

// relistEvery is how often a store lists its outbox's tags again.
const relistEvery = 5 * time.Second

// wantUnseen reports whether any batch of idx asks for its unseen cost.
func wantUnseen(batches []store.SyncBatch, idx []int) bool {
	for _, i := range idx {
		if batches[i].UnseenSince != 0 {
			return true
		}
	}
	return false
}

// unseenSince returns the time after which b's unseen cost counts, or,
// for a batch that did not ask, a time after every event it can have.
func unseenSince(b store.SyncBatch, now int64) int64 {
	if b.UnseenSince != 0 {
		return b.UnseenSince
	}
	return now + int64(time.Hour)
}

// listTags adds the hash tags of calls not yet listed to the exchange's
// list of tags with an outbox, before the calls queue counts there (an
// Exchange reads only listed tags; a tag listed twice is listed once).
func (s *Store) listTags(ctx context.Context, calls []call) error {
	// The list dies with a Redis that loses its data: the tags are listed
	// again every relistEvery.
	if at := s.tagsListed.Load(); time.Since(time.Unix(0, at)) > relistEvery {
		s.tags.Clear()
		s.tagsListed.Store(time.Now().UnixNano())
	}
	var fresh []string
	for _, c := range calls {
		tag := tagOf(c.keys[0])
		if _, ok := s.tags.Load(tag); !ok {
			fresh = append(fresh, tag)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	client, err := s.connect()
	if err != nil {
		return err
	}
	if err := client.Do(ctx, client.B().Sadd().Key(s.exchangeKey("tags")).Member(fresh...).Build()).Error(); err != nil {
		return fmt.Errorf("redisstore: listing the outbox's hash tags: %w", err)
	}
	for _, tag := range fresh {
		s.tags.Store(tag, true)
	}
	return nil
}
