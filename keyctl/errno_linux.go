package keyctl

// sameNumbering reports whether syscall.Errno uses Linux's numbers here.
const sameNumbering = true
