package keys

import (
	"bytes"
	"reflect"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ukeys/ukeys/internal/secmem"
)

// TestPayloadSurvivesCollections holds payloads made by newPayload only
// through their Data slices or only through the payload itself, lets Go's
// collector run over them while other memory churns, and checks every
// byte: a payload is one chunk of the arena, or (without one) one
// allocation the collector does not scan, so the only thing keeping its
// bytes is a reference to that allocation.
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
	for _, p := range whole {
		p.release(nil)
	}
	// In the arena (outside Go's heap), a payload is no allocation of
	// Go's at all; elsewhere, one.
	data := want(40)
	want1 := 1.0
	if p := newPayload(data); secmem.Contains(unsafe.Pointer(p)) {
		want1 = 0
		p.release(nil)
	}
	if a := testing.AllocsPerRun(100, func() { newPayload(data).release(nil) }); a != want1 {
		t.Errorf("newPayload took %v allocations of Go's heap, want %v", a, want1)
	}
}

// TestKeyLayout keeps a Key's pointers and its scalars apart, as the cost
// of a million keys to Go's collector depends on it (see Key): a Key is
// eight words, its record holds no pointer, and neither outgrows its
// 64-byte size class.
func TestKeyLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes below are a 64-bit machine's")
	}
	if n := unsafe.Sizeof(Key{}); n != 64 {
		t.Errorf("a Key is %d bytes, want 64", n)
	}
	if n := unsafe.Sizeof(keyRec{}); n > 64 {
		t.Errorf("a keyRec is %d bytes, want at most 64", n)
	}
	if p := pointerField(reflect.TypeFor[keyRec](), "keyRec"); p != "" {
		t.Errorf("keyRec holds a pointer: %s", p)
	}
}

// pointerField names the first field of t that holds a pointer, "" if
// none does.
func pointerField(t reflect.Type, path string) string {
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if p := pointerField(t.Field(i).Type, path+"."+t.Field(i).Name); p != "" {
				return p
			}
		}
		return ""
	case reflect.Array:
		if t.Len() == 0 {
			return ""
		}
		return pointerField(t.Elem(), path+"[]")
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	}
	return path
}
