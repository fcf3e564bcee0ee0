package hardening

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
)

// Leaks returns, sorted, the names of the texts in which marker appears
// raw, hex-encoded (either case), base64-encoded (standard or URL
// alphabet), Go-quoted or as a Go byte-slice literal ("[115 101 ...]",
// what %v prints for a []byte). A test gives it a marker payload and
// everything it captured: log output, error strings, metrics text.
func Leaks(marker []byte, texts map[string][]byte) []string {
	if len(marker) == 0 {
		return nil
	}
	forms := [][]byte{
		marker,
		[]byte(hex.EncodeToString(marker)),
		bytes.ToUpper([]byte(hex.EncodeToString(marker))),
		[]byte(base64.StdEncoding.EncodeToString(marker)),
		[]byte(base64.URLEncoding.EncodeToString(marker)),
		[]byte(base64.RawStdEncoding.EncodeToString(marker)),
		[]byte(strconv.Quote(string(marker))),
		[]byte(fmt.Sprint(marker)),
	}
	var out []string
	for name, text := range texts {
		for _, f := range forms {
			if bytes.Contains(text, f) {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}
