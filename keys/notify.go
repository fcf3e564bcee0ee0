package keys

import (
	"sync"
	"time"

	"github.com/ukeys/ukeys/keyctl"
)

// NotifyKind is a key notification subtype ([keyctl.NotifyKind]).
type NotifyKind = keyctl.NotifyKind

// [Notification] subtypes, numbered as the kernel's NOTIFY_KEY_* values;
// [NotifyRemoved] stands for the watch queue's removal record.
const (
	NotifyInstantiated = keyctl.NotifyInstantiated
	NotifyUpdated      = keyctl.NotifyUpdated
	NotifyLinked       = keyctl.NotifyLinked
	NotifyUnlinked     = keyctl.NotifyUnlinked
	NotifyCleared      = keyctl.NotifyCleared
	NotifyRevoked      = keyctl.NotifyRevoked
	NotifyInvalidated  = keyctl.NotifyInvalidated
	NotifySetAttr      = keyctl.NotifySetAttr
	NotifyRemoved      = keyctl.NotifyRemoved
)

// Notification is one event on a watched key.
type Notification = keyctl.Notification

// WatchQueue receives notifications for the keys it watches, like the
// kernel's notification pipe. It holds a bounded backlog; when a reader
// falls behind, further events are counted as lost rather than queued
// without limit.
type WatchQueue struct {
	mu      sync.Mutex
	cond    *sync.Cond
	buf     []Notification
	max     int
	lost    uint64
	closed  bool
	kicks   uint64 // Interrupt's count: a wait that sees it change ends
	watches map[*Key]*watch
	// sink, if set, takes each notification as it is posted, in order,
	// instead of the backlog: a notification pipe the daemon writes into
	// keeps its own backlog and counts its own losses.
	sink func(Notification)
}

type watch struct {
	q   *WatchQueue
	key *Key
	id  uint8
}

// NewWatchQueue returns a queue that holds up to size undelivered
// notifications.
func NewWatchQueue(size int) *WatchQueue {
	q := &WatchQueue{max: max(size, 1), watches: make(map[*Key]*watch)}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// NewWatchSink returns a queue that hands each notification to deliver as it
// is posted, one at a time and in the order posted, rather than keeping them
// for [WatchQueue.Next]: deliver must not block, nor call back into the
// queue.
func NewWatchSink(deliver func(Notification)) *WatchQueue {
	q := NewWatchQueue(1)
	q.sink = deliver
	return q
}

func (q *WatchQueue) post(n Notification) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.sink != nil {
		q.sink(n)
		return
	}
	if len(q.buf) >= q.max {
		q.lost++
		return
	}
	q.buf = append(q.buf, n)
	q.cond.Broadcast()
}

// Next returns the next notification, waiting for one; ok is false once
// the queue is closed and drained.
func (q *WatchQueue) Next() (n Notification, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.buf) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.buf) == 0 {
		return Notification{}, false
	}
	n = q.buf[0]
	q.buf = q.buf[1:]
	return n, true
}

// NextTimeout is [WatchQueue.Next] with a bound on the wait: ok is false if
// nothing arrived within d or the queue is closed and drained.
func (q *WatchQueue) NextTimeout(d time.Duration) (n Notification, ok bool) {
	t := time.AfterFunc(d, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer t.Stop()
	deadline := time.Now().Add(d)
	q.mu.Lock()
	defer q.mu.Unlock()
	kicks := q.kicks
	for len(q.buf) == 0 && !q.closed && q.kicks == kicks && time.Now().Before(deadline) {
		q.cond.Wait()
	}
	if len(q.buf) == 0 {
		return Notification{}, false
	}
	n = q.buf[0]
	q.buf = q.buf[1:]
	return n, true
}

// Interrupt ends the waits of [WatchQueue.NextTimeout] under way,
// empty-handed (a daemon handing its connections over wakes its readers so).
func (q *WatchQueue) Interrupt() {
	q.mu.Lock()
	q.kicks++
	q.cond.Broadcast()
	q.mu.Unlock()
}

// WatchState is what a daemon hands over of a queue: the keys it watches
// with their watch ids, the notifications not yet read, and how many
// were lost.
type WatchState struct {
	Watches []WatchedKey   `json:"watches,omitempty"`
	Pending []Notification `json:"pending,omitempty"`
	Lost    uint64         `json:"lost,omitempty"`
}

// WatchedKey is one watch of a queue.
type WatchedKey struct {
	Key Serial `json:"key"`
	ID  uint8  `json:"id"`
}

// State returns what a daemon hands over of q ([Restore.WatchQueue]).
func (q *WatchQueue) State() WatchState {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := WatchState{Pending: append([]Notification(nil), q.buf...), Lost: q.lost}
	for k, w := range q.watches {
		st.Watches = append(st.Watches, WatchedKey{Key: k.serial, ID: w.id})
	}
	return st
}

// WatchQueue makes a queue of size again from what a daemon handed over
// of one ([WatchQueue.State]): its watches on keys of the stream (a watch
// on a key not in it is dropped, as the key's removal would have dropped
// it), its unread notifications and its count of lost ones.
func (rs *Restore) WatchQueue(st WatchState, size int) *WatchQueue {
	q := NewWatchQueue(size)
	q.lost = st.Lost
	for _, n := range st.Pending {
		if len(q.buf) < q.max {
			q.buf = append(q.buf, n)
		} else {
			q.lost++
		}
	}
	for _, w := range st.Watches {
		if k := rs.Key(w.Key); k != nil {
			addWatch(k, q, w.ID)
		}
	}
	return q
}

// WatchSink makes a sink ([NewWatchSink]) again from what a daemon handed
// over of one: its watches on keys of the stream.
func (rs *Restore) WatchSink(st WatchState, deliver func(Notification)) *WatchQueue {
	q := NewWatchSink(deliver)
	for _, w := range st.Watches {
		if k := rs.Key(w.Key); k != nil {
			addWatch(k, q, w.ID)
		}
	}
	return q
}

// TryNext returns the next notification without waiting.
func (q *WatchQueue) TryNext() (Notification, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.buf) == 0 {
		return Notification{}, false
	}
	n := q.buf[0]
	q.buf = q.buf[1:]
	return n, true
}

// Lost returns how many notifications were dropped for lack of room.
func (q *WatchQueue) Lost() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lost
}

// Close stops the queue and removes its watches; [WatchQueue.Next] returns
// what is buffered, then reports the end.
func (q *WatchQueue) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	ws := q.watches
	q.watches = nil
	q.cond.Broadcast()
	q.mu.Unlock()
	for k, w := range ws {
		k.mu.Lock()
		if e := k.ext.Load(); e != nil {
			e.watches = removeWatch(e.watches, w)
		}
		k.mu.Unlock()
	}
}

func removeWatch(ws []*watch, w *watch) []*watch {
	for i, x := range ws {
		if x == w {
			return append(ws[:i:i], ws[i+1:]...)
		}
	}
	return ws
}

func (w *watch) removed(serial Serial) {
	w.q.mu.Lock()
	if w.q.watches != nil {
		delete(w.q.watches, w.key)
	}
	w.q.mu.Unlock()
	w.q.post(Notification{Kind: NotifyRemoved, Key: serial, WatchID: w.id})
}

// notify posts an event to every watch on k.
func notify(k *Key, kind NotifyKind, aux Serial) {
	e := k.ext.Load()
	if e == nil {
		return // never watched: no lock to take
	}
	k.mu.Lock()
	ws := e.watches
	k.mu.Unlock()
	post(ws, k, kind, aux)
}

// notifyLocked is notify with k.mu held, for a change whose record must
// come before those of the key's next changes (a keyring's links). Lock
// order: a key's mu before a queue's.
func notifyLocked(k *Key, kind NotifyKind, aux Serial) {
	if e := k.ext.Load(); e != nil {
		post(e.watches, k, kind, aux)
	}
}

func post(ws []*watch, k *Key, kind NotifyKind, aux Serial) {
	for _, w := range ws {
		w.q.post(Notification{Kind: kind, Key: k.serial, Aux: int32(aux), WatchID: w.id})
	}
}

// addWatch installs a watch of q on k: EBUSY if q already watches k.
func addWatch(k *Key, q *WatchQueue, id uint8) error {
	e := k.extra()
	k.mu.Lock() // before q.mu, as notifyLocked takes them
	defer k.mu.Unlock()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ENOENT
	}
	if _, ok := q.watches[k]; ok {
		q.mu.Unlock()
		return EBUSY
	}
	w := &watch{q: q, key: k, id: id}
	q.watches[k] = w
	q.mu.Unlock()
	e.watches = append(e.watches[:len(e.watches):len(e.watches)], w)
	return nil
}

// dropWatch removes q's watch on k: EBADSLT if there is none. The queue
// gets a removal record, as the kernel sends one.
func dropWatch(k *Key, q *WatchQueue) error {
	q.mu.Lock()
	w, ok := q.watches[k]
	if ok {
		delete(q.watches, k)
	}
	q.mu.Unlock()
	if !ok {
		return EBADSLT
	}
	k.mu.Lock()
	if e := k.ext.Load(); e != nil {
		e.watches = removeWatch(e.watches, w)
	}
	k.mu.Unlock()
	q.post(Notification{Kind: NotifyRemoved, Key: k.serial, WatchID: w.id})
	return nil
}

// WatchKey adds (watchID 0..255) or removes (watchID -1) a watch of q on a
// key (KEYCTL_WATCH_KEY).
//
// A nil q is a descriptor that is no watch queue: [EINVAL], once the key
// is found, as the kernel looks the key up before the queue.
func (c *Caller) WatchKey(id Serial, q *WatchQueue, watchID int) error {
	if watchID < -1 || watchID > 255 {
		return wrap("keyctl_watch_key", id, EINVAL)
	}
	r, err := c.lookupUserKey(id, lookupCreate, View)
	if err != nil {
		return wrap("keyctl_watch_key", id, err)
	}
	defer r.put()
	if q == nil {
		return wrap("keyctl_watch_key", id, EINVAL)
	}
	if watchID == -1 {
		return wrap("keyctl_watch_key", id, dropWatch(r.key, q))
	}
	return wrap("keyctl_watch_key", id, addWatch(r.key, q, uint8(watchID)))
}
