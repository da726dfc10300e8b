// Package archtest holds no code: its test checks the import graph drawn in
// docs/architecture.md "Packages", so a domain package that starts importing
// an adapter fails make test rather than a code review.
package archtest
