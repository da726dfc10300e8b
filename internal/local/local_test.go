package local

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/relaybatch/relay/"

// TestDeployedCodeImportsNoLocal: the functions and the packages they are
// built from never import internal/local; only the CLI (relay dev) and
// tests do.
func TestDeployedCodeImportsNoLocal(t *testing.T) {
	t.Parallel()
	repo := filepath.Join("..", "..")
	for _, dir := range []string{"functions", "internal", "infra"} {
		root := filepath.Join(repo, dir)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(repo, path)
			rel = filepath.ToSlash(rel)
			if d.IsDir() {
				if rel == "internal/local" || d.Name() == "node_modules" || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, module+"internal/local/") || p == module+"internal/local" {
					t.Errorf("%s imports %s: deployed code must not depend on the local emulation", rel, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
