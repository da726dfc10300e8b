package lambdasqs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// eventsUsers are the trees under internal/ that may import
// aws-lambda-go/events: this adapter, the API Gateway adapter, each
// function's main (app/fn: the event and answer types of its handler) and
// the local emulation (internal/local) of API Gateway and Lambda's event
// sources. The domain takes msg.Delivery, so it never needs the events
// package.
var eventsUsers = []string{"lambdasqs", "apigw", "app/fn", "local"}

func TestOnlyAdaptersImportEvents(t *testing.T) {
	t.Parallel()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, p := range eventsUsers {
			if rel == p || strings.HasPrefix(rel, p+"/") {
				return nil
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/aws/aws-lambda-go/events" {
				t.Errorf("internal/%s imports %s: take []msg.Delivery, adapted by internal/lambdasqs", filepath.ToSlash(path[len(root)+1:]), p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
