package keyctl

import (
	"encoding/binary"
	"errors"
)

// NotifyKind is a key notification subtype, numbered as the kernel's
// NOTIFY_KEY_* values.
type NotifyKind uint8

const (
	NotifyInstantiated NotifyKind = 0
	NotifyUpdated      NotifyKind = 1
	NotifyLinked       NotifyKind = 2
	NotifyUnlinked     NotifyKind = 3
	NotifyCleared      NotifyKind = 4
	NotifyRevoked      NotifyKind = 5
	NotifyInvalidated  NotifyKind = 6
	NotifySetAttr      NotifyKind = 7
	// NotifyRemoved is not a kernel subtype: it stands for the watch queue's
	// removal record, sent when a watched key is destroyed or the watch is
	// removed.
	NotifyRemoved NotifyKind = 255
)

var notifyNames = map[NotifyKind]string{
	NotifyInstantiated: "inst", NotifyUpdated: "upd", NotifyLinked: "link",
	NotifyUnlinked: "unlk", NotifyCleared: "clr", NotifyRevoked: "rev",
	NotifyInvalidated: "inv", NotifySetAttr: "attr", NotifyRemoved: "gc",
}

// String returns keyctl watch's word for the kind.
func (n NotifyKind) String() string {
	if s, ok := notifyNames[n]; ok {
		return s
	}
	return "unknown"
}

// Notification is one event on a watched key.
type Notification struct {
	Kind NotifyKind
	// Key is the key the event happened to (the keyring for link events).
	Key Serial
	// Aux is the linked or unlinked key for link events, the negated errno
	// (negative) for a negative instantiation, else 0.
	Aux int32
	// WatchID is the id the watcher gave when it set the watch.
	WatchID uint8
}

// The layout of a watch queue's records (include/uapi/linux/watch_queue.h):
// a watch_notification header of two 32-bit words, the first holding the
// type in its low 24 bits and the subtype in its high 8, the second (info)
// the record's length in bytes (bits 0-6) and the watch's id (bits 8-15);
// then, for a key's event, the key and an auxiliary word (key_notification),
// for a removal, the watched object's 64-bit id (watch_notification_removal).
const (
	// WatchTypeMeta is the type of the queue's own records: removal and loss.
	WatchTypeMeta = 0
	// WatchTypeKeyNotify is the type of a key's events.
	WatchTypeKeyNotify = 1
	// WatchTypeCount bounds the types the kernel knows (WATCH_TYPE__NR);
	// a filter's rule for another type is ignored.
	WatchTypeCount = 4

	// WatchMetaRemoval is the meta subtype of a watch's end.
	WatchMetaRemoval = 0
	// WatchMetaLoss is the meta subtype that says records were lost.
	WatchMetaLoss = 1

	// WatchInfoLength masks a record's length in its info word.
	WatchInfoLength = 0x7f
	// WatchInfoID masks the watch's id in a record's info word.
	WatchInfoID = 0xff00

	// RecordSize is the size of a key's event and of a removal record.
	RecordSize = 16
	// LossRecordSize is the size of a loss record (a bare header).
	LossRecordSize = 8
)

// le is the records' byte order: the machine's, and every ABI ukeys
// intercepts (x86-64, arm64) is little-endian.
var le = binary.LittleEndian

// AppendRecord appends n to b as the kernel's watch queue carries it: a
// key_notification, or for [NotifyRemoved] a watch_notification_removal
// naming the key.
func (n Notification) AppendRecord(b []byte) []byte {
	typ, sub := uint32(WatchTypeKeyNotify), uint32(n.Kind)
	word := uint32(0)
	if n.Kind == NotifyRemoved {
		typ, sub = WatchTypeMeta, WatchMetaRemoval
	} else {
		word = uint32(n.Aux)
	}
	b = le.AppendUint32(b, typ|sub<<24)
	b = le.AppendUint32(b, RecordSize|uint32(n.WatchID)<<8)
	b = le.AppendUint32(b, uint32(n.Key))
	if n.Kind == NotifyRemoved {
		return le.AppendUint32(b, 0) // the 64-bit id's high half: serials are 31-bit
	}
	return le.AppendUint32(b, word)
}

// AppendLossRecord appends the record that tells a reader that records
// were lost for want of room.
func AppendLossRecord(b []byte) []byte {
	b = le.AppendUint32(b, WatchTypeMeta|WatchMetaLoss<<24)
	return le.AppendUint32(b, LossRecordSize)
}

// ErrRecord reports a record that is not a watch queue's.
var ErrRecord = errors.New("keyctl: malformed watch queue record")

// ParseRecord decodes the record at the start of b, as keyutils' consumer
// reads them: its length is the header's, at least a header's and no more
// than b holds. It returns the notification (a removal as [NotifyRemoved]),
// loss if the record says records were lost, and the record's length.
// Records of other types, or key records of another length than
// [RecordSize], come back with known false, to be skipped.
func ParseRecord(b []byte) (n Notification, loss, known bool, size int, err error) {
	if len(b) < LossRecordSize {
		return n, false, false, 0, ErrRecord
	}
	w0, info := le.Uint32(b), le.Uint32(b[4:])
	size = int(info & WatchInfoLength)
	if size < LossRecordSize || size > len(b) {
		return n, false, false, 0, ErrRecord
	}
	typ, sub := w0&0xffffff, uint8(w0>>24)
	id := uint8((info & WatchInfoID) >> 8)
	switch {
	case typ == WatchTypeMeta && sub == WatchMetaLoss:
		return n, true, true, size, nil
	case typ == WatchTypeMeta && sub == WatchMetaRemoval:
		n = Notification{Kind: NotifyRemoved, WatchID: id}
		if size >= RecordSize {
			n.Key = Serial(int32(le.Uint32(b[8:])))
		}
		return n, false, true, size, nil
	case typ == WatchTypeKeyNotify && size == RecordSize && sub <= uint8(NotifySetAttr):
		n = Notification{Kind: NotifyKind(sub), Key: Serial(int32(le.Uint32(b[8:]))),
			Aux: int32(le.Uint32(b[12:])), WatchID: id}
		return n, false, true, size, nil
	}
	return n, false, false, size, nil
}
