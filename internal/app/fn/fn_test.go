package fn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/relaybatch/relay/internal/app/inittest"
)

// mains is each function's main, by the name of its directory under
// functions/ (TestEachFunctionCallsItsMain holds them to each other).
var mains = map[string]func(){
	"api": API, "dispatcher": Dispatcher, "executor": Executor, "deadletter": DeadLetter,
	"finalizer": Finalizer, "webhook": Webhook, "scheduler": Scheduler,
}

func TestMain(m *testing.M) { inittest.Main(m, mains) }

// Each function's init fails at once, naming the function and the
// variable, without a variable the template must give (each of them:
// internal/app's TestLoadLambdaNeedsItsEnvironment); with all of them it
// reaches the Lambda runtime. One test binary runs all seven mains, as
// their bootstraps do.
func TestInitNeedsItsEnvironment(t *testing.T) {
	t.Parallel()
	for name := range mains {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inittest.FailsWithout(t, name)
		})
	}
}

// Every functions/<name>/main.go is one call of its main here, the one
// mains names, so the test above starts what each bootstrap runs.
func TestEachFunctionCallsItsMain(t *testing.T) {
	t.Parallel()
	dirs, err := os.ReadDir(filepath.Join("..", "..", "..", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(mains) {
		t.Errorf("%d directories under functions/, %d mains here", len(dirs), len(mains))
	}
	for _, d := range dirs {
		path := filepath.Join("..", "..", "..", "functions", d.Name(), "main.go")
		called := calledByMain(t, path)
		main, ok := mains[d.Name()]
		if !ok {
			t.Errorf("%s: no main named %q in mains", path, d.Name())
			continue
		}
		if want := runtime.FuncForPC(reflect.ValueOf(main).Pointer()).Name(); !strings.HasSuffix(want, "/fn."+called) {
			t.Errorf("%s calls fn.%s; mains[%q] is %s", path, called, d.Name(), want)
		}
	}
}

// calledByMain is X when the main func of the file at path is exactly
// fn.X(), otherwise it fails the test.
func calledByMain(t *testing.T, path string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "main" || len(fd.Body.List) != 1 {
			continue
		}
		if stmt, ok := fd.Body.List[0].(*ast.ExprStmt); ok {
			call, _ := strings.CutSuffix(types.ExprString(stmt.X), "()")
			if name, ok := strings.CutPrefix(call, "fn."); ok && token.IsIdentifier(name) {
				return name
			}
		}
	}
	t.Fatalf("%s: its main is not one call fn.X()", path)
	return ""
}
