package algorithm

// logRing is bounded-log's wide form, the one it had before its compact
// encoding: a ring of entries of three words (first timestamp, last
// timestamp, count). Decide never needs it; Record, whose late events need
// every entry's last timestamp and count, expands the compact state into a
// ring, merges there and packs the result back (see boundedLog.Record).
//
// Ring state: [0] number of entries, [1] index of the oldest entry in the
// ring, then size entries of three words: first, last, count.
type logRing struct {
	window int64
	m      int64 // units per entry
	size   int64 // entries in the ring
	span   int64 // late events do not make entries span this: ceil(W*m/L)
}

// at returns the offset in the state of the i-th oldest entry.
func (a *logRing) at(s []int64, i int64) int64 {
	return 2 + 3*((s[1]+i)%a.size)
}

// view moves now forward to the newest timestamp in s (so a clock that went
// back gets no allowance) and returns it with the number of entries to drop,
// the index of the first entry counted in S, and S.
func (a *logRing) view(s []int64, now int64) (t, drop, start, sum int64) {
	n := s[0]
	now = clampTime(now)
	if n > 0 {
		now = max(now, s[a.at(s, n-1)+1])
	}
	cut := now - a.window
	// Walk the ring by offset, wrapping, rather than by a modulo per entry.
	o, end := a.at(s, 0), 2+3*a.size
	next := func() {
		if o += 3; o == end {
			o = 2
		}
	}
	for drop < n && s[o+1] <= cut {
		drop++
		next()
	}
	start = drop
	if start < n && s[o] <= cut {
		start++
		next()
	}
	for i := start; i < n; i++ {
		sum += s[o+2]
		next()
	}
	return now, drop, start, sum
}

// add appends cost units at time now, not before the newest entry's last
// timestamp, with cut = now - W. They fill the open entry up to m units, as
// Decide's do, while its first timestamp is after cut and, when entries
// before it are kept, it spans less than span; then they start new
// entries. A straddler (an open entry whose first timestamp is at or before
// cut) is dropped rather than closed, since it is never counted again. So
// a key with at most m units in its window that takes its events in time
// order keeps one entry, as it does under Decide, instead of one per span.
func (a *logRing) add(s []int64, now, cost, cut int64) {
	n := s[0]
	if n > 0 {
		o := a.at(s, n-1)
		switch {
		case s[o] <= cut:
			// The entries before a straddler end at or before its first
			// timestamp, so view has dropped them: it is alone.
			n, s[1] = 0, 0
		case s[o+2] < a.m && (n == 1 || now-s[o] < a.span):
			k := min(cost, a.m-s[o+2])
			s[o+1], s[o+2] = now, s[o+2]+k
			cost -= k
		}
	}
	for cost > 0 && n < a.size {
		k := min(cost, a.m)
		o := a.at(s, n)
		s[o], s[o+1], s[o+2] = now, now, k
		n++
		cost -= k
	}
	s[0] = n
	if cost > 0 { // only Record gets here: the ring is full
		o := a.at(s, n-1)
		s[o+1], s[o+2] = now, addSat(s[o+2], cost)
	}
}

// record adds cost units at now without checking the limit, as merges of
// counts taken elsewhere do. Its entries hold at most m units, as Decide's
// do. An event at or after the newest entry's last timestamp is appended
// (see add). An older one (a late event, pushed by another node) goes, while
// there is room, to:
//
//   - the entry that covers its time (the latest one starting at or before
//     it) if that entry is not full, moving its last timestamp up to the
//     event while the entry then spans less than span (the time L units at
//     the limit's even rate take to fill one entry: ceil(W·m/L));
//   - if the event falls after a full covering entry (or one that would
//     span too long), into the gap: the next entry, its first timestamp
//     moved down to the event while it spans less than span, or a new entry;
//   - if it falls inside a full entry, the first later entry with room, its
//     first timestamp moved down to the end of the entry before it when that
//     keeps its span, or else a new entry at the end of the full one. This
//     is the one place an event is counted as later than it happened: an
//     overcount, never an undercount (see docs/distributed.md, "Merged
//     counts after an outage", for how large and for the two other
//     placements tried);
//   - if it predates every entry, the oldest entry, its first timestamp moved
//     down while it spans less than span, or a new oldest entry.
//
// So entries stay in time order without overlapping and every unit lies at
// or before its entry's last timestamp: at most one entry straddles t-W, and
// the log undercounts (t-W, t] by at most m. Closing entries for their span
// is why the ring has room for twice as many entries as Decide needs. Only
// when the ring is full do units go beyond m, into the entry covering their
// time.
func (a *logRing) record(s []int64, now, cost int64) {
	latest, drop, _, _ := a.view(s, now)
	s[1] = (s[1] + drop) % a.size
	s[0] -= drop
	now = clampTime(now)
	if n := s[0]; n == 0 || now >= s[a.at(s, n-1)+1] {
		a.add(s, now, cost, latest-a.window)
		return
	}
	if now <= latest-a.window {
		return // it would be dropped right away
	}
	for cost > 0 {
		n := s[0]
		i := n - 1
		for i >= 0 && s[a.at(s, i)] > now {
			i--
		}
		var o int64 // the entry that takes units, after setting its times
		switch {
		case i < 0: // before every entry
			o = a.at(s, 0)
			if !a.room(s[o+2], now, s[o+1]) {
				if n < a.size {
					o = a.insert(s, 0, now)
					break
				}
				s[o], s[o+2] = now, addSat(s[o+2], cost) // the ring is full
				return
			}
			s[o] = now
		case s[a.at(s, i)+2] < a.m && (now <= s[a.at(s, i)+1] || a.room(0, s[a.at(s, i)], now)):
			o = a.at(s, i)
			s[o+1] = max(s[o+1], now)
		case now > s[a.at(s, i)+1]: // in the gap after a full entry
			if o = a.at(s, i+1); a.room(s[o+2], now, s[o+1]) {
				s[o] = now
				break
			}
			if n < a.size {
				o = a.insert(s, i+1, now)
				break
			}
			o = a.at(s, i)
			s[o+1], s[o+2] = now, addSat(s[o+2], cost) // the ring is full
			return
		default: // inside a full entry
			j := i + 1
			for j < n && s[a.at(s, j)+2] >= a.m {
				j++
			}
			if j < n {
				o = a.at(s, j)
				if t := max(now, s[a.at(s, j-1)+1]); s[o+1]-t < a.span {
					s[o] = min(s[o], t)
				}
				break
			}
			if n < a.size {
				o = a.insert(s, i+1, s[a.at(s, i)+1])
				break
			}
			o = a.at(s, i)
			s[o+2] = addSat(s[o+2], cost) // the ring is full
			return
		}
		k := min(cost, a.m-s[o+2])
		s[o+2] += k
		cost -= k
	}
}

// room reports whether an entry of count units from first to last may take
// more units from Record.
func (a *logRing) room(count, first, last int64) bool {
	return count < a.m && last-first < a.span
}

// insert puts an empty entry at time t at index i, moving the entries from
// i on one place newer, and returns its offset. The ring must not be full.
func (a *logRing) insert(s []int64, i, t int64) int64 {
	n := s[0]
	if i == 0 {
		s[1] = (s[1] + a.size - 1) % a.size
	} else {
		for j := n; j > i; j-- {
			d, o := a.at(s, j), a.at(s, j-1)
			s[d], s[d+1], s[d+2] = s[o], s[o+1], s[o+2]
		}
	}
	s[0] = n + 1
	o := a.at(s, i)
	s[o], s[o+1], s[o+2] = t, t, 0
	return o
}
