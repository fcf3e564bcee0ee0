package script

import (
	"errors"
	"strings"
)

// Split splits a command line into words as a shell would, without
// expanding anything: blanks (spaces and tabs) separate words, '…' quotes
// anything but ', and "…" quotes anything, a backslash in it escaping the
// next character (\" and \\). Quotes may join parts of one word
// (a'b c'd is one word); ” and "" are empty words.
func Split(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	in := false // in a word
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated quote")
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		args = append(args, cur.String())
	}
	return args, nil
}
