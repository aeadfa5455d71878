package conf

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/conf/invalid/*.golden from the current output")

// TestValidFiles checks that every file in testdata/conf/valid loads.
func TestValidFiles(t *testing.T) {
	files, err := filepath.Glob("../testdata/conf/valid/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no valid fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			if _, err := Load(f); err != nil {
				t.Fatalf("Load: %v", err)
			}
		})
	}
}

// TestInvalidFiles checks the exact error text for every file in
// testdata/conf/invalid against NAME.golden beside it. Run with -update to
// rewrite the golden files.
func TestInvalidFiles(t *testing.T) {
	files, err := filepath.Glob("../testdata/conf/invalid/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no invalid fixtures: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".toml"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(name, data)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", cfg)
			}
			checkErrors(t, err, name)
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(f, ".toml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./conf -run TestInvalidFiles -update)", err)
			}
			if got != string(want) {
				t.Errorf("error text differs from %s\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
}

// checkErrors asserts the error contract of Parse: err is one *Error or a
// join of them, each naming file.
func checkErrors(t testing.TB, err error, file string) {
	t.Helper()
	var first *Error
	if !errors.As(err, &first) {
		t.Fatalf("errors.As(%T, *Error) failed: %v", err, err)
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		ce, ok := e.(*Error)
		if !ok {
			t.Fatalf("error %T is not a *Error: %v", e, e)
		}
		if ce.File != file {
			t.Fatalf("error names file %q, want %q: %v", ce.File, file, ce)
		}
		if ce.Msg == "" {
			t.Fatalf("error has no message: %#v", ce)
		}
	}
}
