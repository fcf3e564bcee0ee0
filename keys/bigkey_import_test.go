package keys_test

// The package's own tests add big_keys too (the hand-over's, the
// limits', the capabilities'): big_key is registered for the whole test
// binary, as a program registers it, by importing its package.
import _ "github.com/ukeys/ukeys/keys/bigkey"
