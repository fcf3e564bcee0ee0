// Package certtest makes X.509 certificates and PKCS#8 keys for tests of
// the asymmetric key type: a CA, certificates it signs, self-signed ones,
// with Go's crypto/x509, so that no test depends on openssl.
package certtest
