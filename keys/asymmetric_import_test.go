package keys_test

// The package's own tests add asymmetric keys too (the hand-over's, the
// capabilities', the collector's, the restrictions' with keys of other
// types): asymmetric is registered for the whole test binary, as a
// program registers it, by importing its package.
import _ "github.com/ukeys/ukeys/keys/asymmetric"
