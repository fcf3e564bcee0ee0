package keyctl

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// The records as the kernel lays them out (watch_queue.h), byte for byte.
func TestRecordLayout(t *testing.T) {
	cases := []struct {
		name string
		n    Notification
		want string
	}{
		// type 1 in the low 24 bits, subtype 2 (linked) in the high 8;
		// info: length 16, watch id 1 at bits 8-15; key; aux.
		{"link", Notification{Kind: NotifyLinked, Key: 0x1234, Aux: 0x5678, WatchID: 1},
			"01000002" + "10010000" + "34120000" + "78560000"},
		// A negative instantiation: aux is the negated errno.
		{"inst rejected", Notification{Kind: NotifyInstantiated, Key: 7, Aux: -126, WatchID: 2},
			"01000000" + "10020000" + "07000000" + "82ffffff"},
		{"setattr", Notification{Kind: NotifySetAttr, Key: 9, WatchID: 0xff},
			"01000007" + "10ff0000" + "09000000" + "00000000"},
		// A removal: type 0 (meta), subtype 0, the key as a 64-bit id.
		{"removal", Notification{Kind: NotifyRemoved, Key: 0x7fffffff, WatchID: 1},
			"00000000" + "10010000" + "ffffff7f" + "00000000"},
	}
	for _, c := range cases {
		got := hex.EncodeToString(c.n.AppendRecord(nil))
		if got != c.want {
			t.Errorf("%s: record %s, want %s", c.name, got, c.want)
		}
		n, loss, known, size, err := ParseRecord(c.n.AppendRecord(nil))
		if err != nil || loss || !known || size != RecordSize || n != c.n {
			t.Errorf("%s: parsed back as %+v loss=%v known=%v size=%d err=%v", c.name, n, loss, known, size, err)
		}
	}
	if got := hex.EncodeToString(AppendLossRecord(nil)); got != "00000001"+"08000000" {
		t.Errorf("loss record %s", got)
	}
	if _, loss, known, size, err := ParseRecord(AppendLossRecord(nil)); !loss || !known || size != LossRecordSize || err != nil {
		t.Errorf("loss record parsed as loss=%v known=%v size=%d err=%v", loss, known, size, err)
	}
}

func TestParseRecordRefusesWhatIsNotOne(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{1, 0, 0, 2},                   // shorter than a header
		{1, 0, 0, 2, 4, 0, 0, 0},       // a length under a header's
		{1, 0, 0, 2, 0x20, 0, 0, 0},    // longer than what was read
		{1, 0, 0, 2, 0x7f, 0, 0, 0, 0}, // ditto
	} {
		if _, _, _, _, err := ParseRecord(b); err == nil {
			t.Errorf("ParseRecord(% x) accepted", b)
		}
	}
	// A record of another type, or a key record of another length, is
	// well formed but not known: a reader skips it by its length.
	usb := []byte{3, 0, 0, 0, 8, 0, 0, 0}
	if _, _, known, size, err := ParseRecord(usb); err != nil || known || size != 8 {
		t.Errorf("a USB record: known=%v size=%d err=%v", known, size, err)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(Notification{Kind: NotifyLinked, Key: 3, Aux: 4, WatchID: 1}.AppendRecord(nil))
	f.Add(Notification{Kind: NotifyRemoved, Key: 3, WatchID: 1}.AppendRecord(nil))
	f.Add(AppendLossRecord(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, loss, known, size, err := ParseRecord(b)
		if err != nil {
			return
		}
		if size < LossRecordSize || size > len(b) {
			t.Fatalf("size %d of %d bytes", size, len(b))
		}
		if known && !loss && size == RecordSize {
			// A key record or a full removal encodes back to its bytes,
			// but for what the kernel leaves unused (the removal's high
			// word, the info's type bits).
			again := n.AppendRecord(nil)
			if n.Kind != NotifyRemoved && !bytes.Equal(again[8:], b[8:16]) {
				t.Fatalf("% x parsed as %+v, encodes to % x", b[:size], n, again)
			}
		}
	})
}
