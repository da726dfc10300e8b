package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

func TestFilesUpload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		sizes      []int
		presign    bool
		json       bool
		wantRoutes []string
	}{
		{"two small files", []int{10, 20}, true, false, []string{"multipart", "multipart"}},
		{"small and big", []int{10, maxRequestData + 1}, true, false, []string{"multipart", "presigned"}},
		{"big without presign", []int{maxRequestData + 1}, false, true, []string{"uploads"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, tt.presign)
			args := []string{"files", "upload"}
			var inputs [][]byte
			for i, n := range tt.sizes {
				p, data := writeInput(t, "in"+string(rune('0'+i))+".jsonl", n)
				args = append(args, p)
				inputs = append(inputs, data)
			}
			if tt.json {
				args = append(args, "--json")
			}
			stdout, _, err := runCLI(t, f.env(), args...)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			if len(lines) != len(tt.sizes) {
				t.Fatalf("stdout = %q, want %d lines", stdout, len(tt.sizes))
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !reflect.DeepEqual(f.routes, tt.wantRoutes) {
				t.Errorf("routes = %v, want %v", f.routes, tt.wantRoutes)
			}
			for i, l := range lines {
				id := l
				if tt.json {
					var got openai.FileObject
					if err := json.Unmarshal([]byte(l), &got); err != nil || got.Status != "processed" {
						t.Errorf("line %q: want a processed File object (%v)", l, err)
					}
					id = got.ID
				}
				if file := f.files[id]; file == nil || !bytes.Equal(file.data, inputs[i]) {
					t.Errorf("file %s does not hold the bytes of input %d", id, i)
				}
			}
		})
	}
}

func TestFilesCommands(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, true)
	in, data := writeInput(t, "in.jsonl", 321)
	id, _, err := runCLI(t, f.env(), "files", "upload", in)
	if err != nil {
		t.Fatal(err)
	}
	id = strings.TrimSpace(id)
	out := filepath.Join(t.TempDir(), "copy.jsonl")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"list", []string{"files", "list"}, []string{"ID", "FILENAME", id, "in.jsonl", "321", "processed"}},
		{"list --json", []string{"files", "list", "--json"}, []string{`"object":"list"`, id}},
		{"get", []string{"files", "get", id}, []string{"filename", "in.jsonl", "processed"}},
		{"get --json", []string{"files", "get", id, "--json"}, []string{`"id":"` + id + `"`}},
		{"content to stdout", []string{"files", "content", id}, []string{string(data)}},
		{"content to a file", []string{"files", "content", id, "-o", out}, nil},
	}
	t.Run("read", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				stdout, _, err := runCLI(t, f.env(), tt.args...)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range tt.want {
					if !strings.Contains(stdout, w) {
						t.Errorf("stdout %q does not contain %q", stdout, w)
					}
				}
			})
		}
	})
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("files content -o wrote %d bytes (%v), want the %d uploaded", len(got), err, len(data))
	}
	stdout, _, err := runCLI(t, f.env(), "files", "delete", id)
	if err != nil || stdout != "deleted "+id+"\n" {
		t.Errorf("delete: stdout %q, err %v", stdout, err)
	}
	if _, _, err := runCLI(t, f.env(), "files", "get", id); exitCode(err) != 1 || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("get after delete: err = %v, want a 404", err)
	}
}

func TestFilesUsage(t *testing.T) {
	t.Parallel()
	tests := [][]string{
		{"files"},
		{"files", "upload"},
		{"files", "get"},
		{"files", "list", "extra"},
		{"files", "get", "file-1", "-o", "x"},
		{"files", "nope"},
	}
	for _, args := range tests {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			_, _, err := runCLI(t, map[string]string{}, args...)
			if exitCode(err) != 2 {
				t.Errorf("err = %v, want a usage error (exit 2)", err)
			}
		})
	}
}
