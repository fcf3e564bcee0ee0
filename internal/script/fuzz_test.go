package script

import (
	"reflect"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that what it accepts is
// what String writes: the text itself (a final newline added), parsed
// again to the same File.
func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("")
	f.Add("$ x\n<< no newline")
	f.Add("# only a comment\n\n")
	f.Add("$ x\n1< a\n2| \n? -3\n")
	f.Add("$ 'a b' \"c\\\"d\"\n")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(text)
		if err != nil {
			return
		}
		out := p.String()
		if want := text; !strings.HasSuffix(want, "\n") {
			want += "\n"
			if out != want {
				t.Fatalf("Parse(%q).String() = %q", text, out)
			}
		} else if out != text {
			t.Fatalf("Parse(%q).String() = %q", text, out)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of its own String %q: %v", out, err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("Parse(%q) = %#v, then %#v", text, p, again)
		}
	})
}

// FuzzSplit checks that Split never panics and that words quoted as a
// shell would quote them split back to themselves.
func FuzzSplit(f *testing.F) {
	f.Add("a 'b c' \"d\\\"e\"")
	f.Add("it's")
	f.Fuzz(func(t *testing.T, line string) {
		words, err := Split(line)
		if err != nil {
			return
		}
		var q []string
		for _, w := range words {
			q = append(q, "'"+strings.ReplaceAll(w, "'", `'"'"'`)+"'")
		}
		again, err := Split(strings.Join(q, " "))
		if err != nil || !reflect.DeepEqual(again, words) {
			t.Fatalf("Split(%q) = %q; quoted and split again: %q, %v", line, words, again, err)
		}
	})
}
