// Package asymmetric is the kernel's "asymmetric" key type for package
// keys: public keys from X.509 certificates and key pairs from PKCS#8
// private keys, the public-key operations on them (KEYCTL_PKEY_QUERY,
// _ENCRYPT, _DECRYPT, _SIGN, _VERIFY), and the keyring restrictions that
// check a certificate's signature (builtin_trusted,
// builtin_and_secondary_trusted, key_or_keyring:ID[:chain]).
//
// Importing the package registers the type with keys ([keys.Register]),
// so that every [keys.Service] made afterwards has it, as importing
// image/png makes PNG known to [image.Decode]:
//
//	import _ "github.com/ukeys/ukeys/keys/asymmetric"
//
// The type reaches the model only through keys' exported surface: its
// parsing is [keys.Type]'s Preparse (marked Costly, so that a daemon
// bounds it), the pkey operations its Pkey hook (keys checks the
// parameter string, the permissions and the sizes; this package the
// cryptography), the restrictions its LookupRestriction, which search
// keyrings with [keys.Service.SearchKeyring]. The system keyrings
// .builtin_trusted_keys and .secondary_trusted_keys are the model's;
// [AddBuiltinTrusted] fills the first from a certificate, as the
// kernel's build compiles certificates in.
package asymmetric
