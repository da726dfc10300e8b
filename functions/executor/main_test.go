package main

import (
	"testing"

	"github.com/relaybatch/relay/internal/app/inittest"
)

func TestMain(m *testing.M) { inittest.Main(m, main) }

// The init fails at once, naming the variable, without any variable the
// template must give; with all of them it reaches the Lambda runtime.
func TestInitNeedsItsEnvironment(t *testing.T) { inittest.FailsWithout(t) }
