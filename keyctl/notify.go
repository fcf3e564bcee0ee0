package keyctl

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
