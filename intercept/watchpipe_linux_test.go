package intercept

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ukeys/ukeys/keyctl"
)

// rule encodes one watch_notification_type_filter.
func rule(typ, info, mask, subtypes uint32) []byte {
	b := make([]byte, filterRuleSize)
	binary.LittleEndian.PutUint32(b[0:], typ)
	binary.LittleEndian.PutUint32(b[4:], info)
	binary.LittleEndian.PutUint32(b[8:], mask)
	binary.LittleEndian.PutUint32(b[12:], subtypes)
	return b
}

// header encodes a watch_notification_filter's count and reserved word.
func header(nr, reserved uint32) []byte {
	b := make([]byte, filterHeader)
	binary.LittleEndian.PutUint32(b[0:], nr)
	binary.LittleEndian.PutUint32(b[4:], reserved)
	return b
}

func join(parts ...[]byte) (b []byte) {
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// A filter passes what watch_queue.c's filter_watch_notification passes:
// an event of a type some rule names, whose subtype is in that rule's
// set and whose info word (length and watch id) matches under its mask.
func TestWatchFilterPasses(t *testing.T) {
	const key = keyctl.WatchTypeKeyNotify
	link := keyctl.Notification{Kind: keyctl.NotifyLinked, Key: 1, WatchID: 1}
	upd := keyctl.Notification{Kind: keyctl.NotifyUpdated, Key: 1, WatchID: 2}
	cases := []struct {
		name   string
		filter []byte
		pass   [2]bool // link, upd
	}{
		{"links alone", join(header(1, 0), rule(key, 0, 0, 1<<keyctl.NotifyLinked)), [2]bool{true, false}},
		{"links and updates", join(header(1, 0), rule(key, 0, 0, 1<<keyctl.NotifyLinked|1<<keyctl.NotifyUpdated)), [2]bool{true, true}},
		{"watch 2 alone", join(header(1, 0), rule(key, 2<<8, 0xff00, 0xff)), [2]bool{false, true}},
		{"another type alone", join(header(1, 0), rule(2, 0, 0, 0xff)), [2]bool{false, false}},
		{"an unknown type is ignored", join(header(2, 0), rule(9, 0, 0, 0xff), rule(key, 0, 0, 1<<keyctl.NotifyUpdated)), [2]bool{false, true}},
		{"no subtype", join(header(1, 0), rule(key, 0, 0, 0)), [2]bool{false, false}},
	}
	for _, c := range cases {
		f, errno := parseFilter(c.filter)
		if errno != 0 {
			t.Errorf("%s: %v", c.name, errno)
			continue
		}
		if got := [2]bool{f.pass(link), f.pass(upd)}; got != c.pass {
			t.Errorf("%s: passes link, update: %v, want %v", c.name, got, c.pass)
		}
	}
	var none *watchFilter
	if !none.pass(link) {
		t.Error("no filter holds back an event")
	}
}

// The filters watch_queue_set_filter refuses, with its errno.
func TestWatchFilterRefusals(t *testing.T) {
	key := uint32(keyctl.WatchTypeKeyNotify)
	for _, c := range []struct {
		name   string
		filter []byte
		want   error
	}{
		{"no rules", header(0, 0), unix.EINVAL},
		{"17 rules", header(17, 0), unix.EINVAL},
		{"reserved set", join(header(1, 1), rule(key, 0, 0, 1)), unix.EINVAL},
		{"info outside its mask", join(header(1, 0), rule(key, 0x100, 0, 1)), unix.EINVAL},
		{"mask over the length", join(header(1, 0), rule(key, 0, 0x7f, 1)), unix.EINVAL},
		{"short of its rules", join(header(2, 0), rule(key, 0, 0, 1)), unix.EFAULT},
	} {
		if _, errno := parseFilter(c.filter); errno != c.want {
			t.Errorf("%s: %v, want %v", c.name, errno, c.want)
		}
	}
}

func FuzzParseFilter(f *testing.F) {
	f.Add(join(header(1, 0), rule(1, 0, 0, 4)))
	f.Add(join(header(2, 0), rule(9, 0, 0, 0xff), rule(1, 0x200, 0xff00, 0xff)))
	f.Add(header(16, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		filt, errno := parseFilter(b)
		if errno != 0 {
			return
		}
		if len(b) < filterHeader || len(filt.rules) > maxFilters {
			t.Fatalf("accepted %d bytes, %d rules", len(b), len(filt.rules))
		}
		for _, r := range filt.rules {
			if r.typ >= keyctl.WatchTypeCount || r.info&^r.mask != 0 || r.mask&keyctl.WatchInfoLength != 0 {
				t.Fatalf("a rule the kernel refuses or ignores: %+v", r)
			}
		}
		// Whatever it passes, it decides without failing.
		for k := keyctl.NotifyInstantiated; k <= keyctl.NotifySetAttr; k++ {
			filt.pass(keyctl.Notification{Kind: k, WatchID: 3})
		}
	})
}
