// Package bigkey is the kernel's "big_key" key type for package keys:
// payloads of up to 1 MiB, kept in memory up to [Inline] bytes and above
// that sealed (AES-GCM, a key of its own per payload) in an unlinked file,
// as the kernel keeps them in shmem.
//
// Importing the package registers the type with keys ([keys.Register]), so
// that every [keys.Service] made afterwards has it, as importing image/png
// makes PNG known to [image.Decode]:
//
//	import _ "github.com/ukeys/ukeys/keys/bigkey"
//
// Each file holds one of the process's descriptors:
// [keys.SetBigKeyFileLimit] bounds them for the process and [keys.Share] for
// a tenant; a big_key that would pass a bound fails with EMFILE (EDQUOT for
// one uid's share), and a payload of up to Inline bytes needs no file. A
// big_key costs its owner's byte quota 16 bytes whatever its size, as the
// kernel charges its handle; a daemon that takes over
// ([keys.Service.Export]) gets the plaintext and seals it again with a key
// of its own.
package bigkey
