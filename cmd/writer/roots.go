package main

// TLS roots for the AWS endpoints where the system has none, as in the
// container image (FROM scratch, infra/image): Go uses this pinned bundle
// only when it finds no system roots, so elsewhere (Lambda, a VM, a
// developer's machine) the system's roots still apply.
import _ "golang.org/x/crypto/x509roots/fallback"
