package hardening

import (
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
)

func TestLeaksFindsEveryForm(t *testing.T) {
	m := []byte("marker-\x01-payload")
	texts := map[string][]byte{
		"clean":  []byte("nothing to see marker- payload"),
		"raw":    append([]byte("x "), m...),
		"hex":    []byte(fmt.Sprintf("%X", m)),
		"base64": []byte(base64.URLEncoding.EncodeToString(m)),
		"quoted": []byte(fmt.Sprintf("%q", m)),
		"slice":  []byte(fmt.Sprintf("payload=%v", m)),
	}
	got := Leaks(m, texts)
	want := []string{"base64", "hex", "quoted", "raw", "slice"}
	if !slices.Equal(got, want) {
		t.Fatalf("Leaks = %v, want %v", got, want)
	}
	if Leaks(nil, texts) != nil {
		t.Fatal("an empty marker matches nothing")
	}
}
