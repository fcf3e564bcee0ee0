package keys

import (
	"bytes"
	"runtime"
	"testing"
)

// TestPayloadSurvivesCollections holds payloads made by newPayload only
// through their Data slices or only through the payload itself, lets Go's
// collector run over them while other memory churns, and checks every
// byte: a payload is one allocation the collector does not scan, so the
// only thing keeping its bytes is a reference to that allocation.
func TestPayloadSurvivesCollections(t *testing.T) {
	want := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(n + i*7)
		}
		return b
	}
	var datas [][]byte
	var whole []*Payload
	for n := range 300 {
		datas = append(datas, newPayload(want(n)).Data)
		whole = append(whole, newPayload(want(n)))
	}
	var sink [][]byte
	for range 3 {
		runtime.GC()
		for i := range 10000 {
			sink = append(sink, bytes.Repeat([]byte{0xa5}, i%200))
		}
		sink = sink[:0]
	}
	for n := range 300 {
		if !bytes.Equal(datas[n], want(n)) {
			t.Fatalf("%d bytes held by Data: got %x", n, datas[n])
		}
		if p := whole[n]; p.Extra != nil || len(p.Data) != n || cap(p.Data) != n || !bytes.Equal(p.Data, want(n)) {
			t.Fatalf("%d bytes held by the payload: %+v", n, p)
		}
	}
	data := want(40)
	if a := testing.AllocsPerRun(100, func() { _ = newPayload(data) }); a != 1 {
		t.Errorf("newPayload took %v allocations, want one", a)
	}
}
