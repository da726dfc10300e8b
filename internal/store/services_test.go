package store

import (
	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/files"
)

// The Store implements the services' store interfaces. The checks stand in
// a test: an adapter does not import the services it stores for
// (docs/architecture.md "Packages"), and go vet compiles the tests.
var (
	_ auth.Store  = (*Store)(nil)
	_ files.Store = (*Store)(nil)
)
